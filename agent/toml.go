package agent

import (
	"fmt"
	"path/filepath"

	"github.com/pelletier/go-toml/v2"
)

// Codex CLI reads hooks from inline [hooks] tables of its config.toml as
// well as from hooks.json beside it, and runs both
// (openai/codex, codex-rs/hooks/src/engine/discovery.rs). Install writes
// only hooks.json, whose JSON it can change byte for byte; a config.toml
// whose [hooks] already runs snapback's hook is named, so that the user
// can keep one of the two, and doctor counts it as installed. It is read
// with go-toml, the TOML library snapback.toml is read with.

// ConfigHooks says whether the TOML config file rel under dir (rel ""
// or no file: false) holds, in its [hooks] tables, a hook whose command
// is this harness's snapback hook. A file that is not TOML is an error
// naming it.
func (h *Harness) ConfigHooks(dir, rel string) (bool, error) {
	if rel == "" {
		return false, nil
	}
	f, b, err := openSettings(filepath.Join(dir, rel), rel, false) // bounded, regular files only, never waits
	if f == nil || err != nil {
		return false, err
	}
	f.Close() // read-only
	var doc struct {
		Hooks map[string]any `toml:"hooks"`
	}
	if err := toml.Unmarshal(b, &doc); err != nil {
		return false, fmt.Errorf("%s: %w", rel, err)
	}
	// [[hooks.EVENT]] groups, each with [[hooks.EVENT.hooks]] handlers;
	// other keys ([hooks.state]) are not lists and hold no command.
	for _, groups := range doc.Hooks {
		gs, _ := groups.([]any)
		for _, g := range gs {
			gm, _ := g.(map[string]any)
			hs, _ := gm["hooks"].([]any)
			for _, x := range hs {
				xm, _ := x.(map[string]any)
				if c, _ := xm["command"].(string); h.ownCommand(c) {
					return true, nil
				}
			}
		}
	}
	return false, nil
}
