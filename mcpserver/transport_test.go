package mcpserver

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// wire is a server served over Transport, driven line by line as a
// client's stdio would drive it.
type wire struct {
	t    testing.TB
	in   *io.PipeWriter
	out  chan string
	done chan error
}

// wireServer is one server for every session of the tests (as a server
// is made for many): the fuzzer makes thousands.
var wireServer = sync.OnceValue(func() *mcp.Server {
	// Exe: no binary, so that a tool call a fuzzed line makes fails fast.
	return New(Options{Exe: "/nonexistent/snapback", Dir: os.TempDir(), Version: "test"})
})

func serveWire(t testing.TB) *wire {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	w := &wire{t: t, in: inW, out: make(chan string, 64), done: make(chan error, 1)}
	ss, err := wireServer().Connect(context.Background(), Transport(inR, outW), nil)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		w.done <- ss.Wait()
		outW.Close()
	}()
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(outR)
		sc.Buffer(nil, 64<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	// The server answers each line as it reads it and reads on only as
	// its answers are taken, like any server on a pipe: they are queued
	// here without bound, so a test may write all its lines first. (With
	// w.out alone, more than its 64 bad lines in one write hung the test,
	// and CI's fuzz step with it.)
	go func() {
		var q []string
		in := lines
		for in != nil || len(q) > 0 {
			var out chan string
			var head string
			if len(q) > 0 {
				out, head = w.out, q[0]
			}
			select {
			case l, ok := <-in:
				if !ok {
					in = nil
					continue
				}
				q = append(q, l)
			case out <- head:
				q = q[1:]
			}
		}
		close(w.out)
	}()
	return w
}

func (w *wire) send(line string) {
	w.t.Helper()
	if _, err := io.WriteString(w.in, line+"\n"); err != nil {
		w.t.Fatalf("write %.60q: the server is gone: %v", line, err)
	}
}

// next is the server's next line, decoded; it fails on a line that is
// not a JSON-RPC 2.0 response, and when none comes in time.
func (w *wire) next() (resp struct {
	ID    any             `json:"id"`
	Res   json.RawMessage `json:"result"`
	Error *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}) {
	w.t.Helper()
	select {
	case line, ok := <-w.out:
		if !ok {
			w.t.Fatalf("the server ended: %v", <-w.done)
		}
		var v struct {
			Version string `json:"jsonrpc"`
		}
		if err := json.Unmarshal([]byte(line), &v); err != nil || v.Version != "2.0" {
			w.t.Fatalf("the server wrote %.200q: not JSON-RPC 2.0", line)
		}
		json.Unmarshal([]byte(line), &resp)
		return resp
	case <-time.After(20 * time.Second):
		w.t.Fatal("no answer from the server in 20s")
	}
	return
}

// handshake initializes a session and lists the tools: the server serves.
func (w *wire) handshake(initID, listID string) {
	w.t.Helper()
	w.send(`{"jsonrpc":"2.0","id":"` + initID + `","method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}`)
	w.send(`{"jsonrpc":"2.0","method":"notifications/initialized","params":{}}`)
	w.send(`{"jsonrpc":"2.0","id":"` + listID + `","method":"tools/list","params":{}}`)
	for {
		r := w.next()
		if r.ID == listID {
			if r.Error != nil || !strings.Contains(string(r.Res), `"name":"status"`) {
				w.t.Fatalf("tools/list after the bad lines: %+v %s", r.Error, r.Res)
			}
			return
		}
	}
}

// TestBadLines: a line that is not JSON, JSON that is no JSON-RPC message
// the server takes, and a line over MaxLine are each answered with a
// JSON-RPC error (-32700, -32600; the request's id when it has one) and
// the server goes on: the SDK's own transport ended the session at the
// first, and the agent lost every tool.
func TestBadLines(t *testing.T) {
	w := serveWire(t)
	for _, tc := range []struct {
		line string
		code int
		id   any
	}{
		{`not json`, -32700, nil},
		{`{"jsonrpc":"2.0","id":1,"method":"ping"`, -32700, nil},
		{`{"jsonrpc":"2.0","id":1,"method":"ping"} {}`, -32700, nil},
		{`{"jsonrpc":"1.0","id":7,"method":"ping"}`, -32600, 7.0},
		{`{"jsonrpc":"2.0","id":"a","method":3}`, -32600, "a"},
		{`{"jsonrpc":"2.0"}`, -32600, nil},
		{`[]`, -32600, nil},
		{`[{"jsonrpc":"2.0","id":1,"method":"ping"}]`, -32600, nil},
		{`"just a string"`, -32600, nil},
		{`{"jsonrpc":"2.0","id":{"x":1},"method":"ping"}`, -32600, nil},
		{`{"jsonrpc":"2.0","id":1,"method":"ping","params":` + strings.Repeat(" ", MaxLine) + `{}}`, -32600, nil},
	} {
		w.send(tc.line)
		r := w.next()
		if r.Error == nil || r.Error.Code != tc.code || r.ID != tc.id {
			t.Fatalf("line %.60q: answered id %v error %+v; want id %v, code %d", tc.line, r.ID, r.Error, tc.id, tc.code)
		}
	}
	w.send("   ") // a blank line is no message: no answer
	w.handshake("init", "list")
	w.send(`{"jsonrpc":"2.0","id":9,"method":"ping"}  `) // space around a good line
	if r := w.next(); r.ID != 9.0 || r.Error != nil {
		t.Fatalf("ping: %+v", r)
	}
	w.in.Close()
	if err := <-w.done; err != nil && !strings.Contains(err.Error(), "EOF") {
		t.Fatalf("the server ended with %v, want EOF", err)
	}
}

// FuzzFrames sends any bytes as lines, then a handshake: whatever came
// before, every line the server writes is JSON-RPC 2.0 and the server
// still serves.
func FuzzFrames(f *testing.F) {
	for _, s := range []string{
		"not json", `{"jsonrpc":"2.0","id":1,"method":"ping"}`, `[{"jsonrpc":"2.0","id":1,"method":"ping"}]`,
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`, `{"jsonrpc":"2.0","id":1,"result":{}}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"status","arguments":{"dir":"-x"}}}`,
		"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\r\n{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}",
		"\x00\xff{", `{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}`, `{"jsonrpc":"2.0","ID":1,"Method":"ping"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		w := serveWire(t)
		defer w.in.Close()
		if _, err := w.in.Write(append(data, '\n')); err != nil {
			t.Fatalf("the server is gone: %v", err)
		}
		w.handshake("snapback-fuzz-init", "snapback-fuzz-list")
	})
}
