package suggest

import "testing"

func TestClosest(t *testing.T) {
	words := []string{"force", "mode", "json", "path"}
	for name, want := range map[string]string{"froce": "force", "mdoe": "mode", "jsno": "json", "paht": "path", "bogus": "", "": ""} {
		if got := Closest(name, words); got != want {
			t.Errorf("Closest(%q) = %q, want %q", name, got, want)
		}
	}
}
