package mcpserver

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// MaxLine bounds one line (one JSON-RPC message) the server reads: a
// tool call's arguments are ids, paths and a message, far below it.
const MaxLine = 4 << 20

// JSON-RPC's error codes for a line that is not a message.
const (
	codeParseError     = -32700 // not JSON
	codeInvalidRequest = -32600 // JSON, but not a message the server takes
)

// Transport serves MCP over newline-delimited JSON-RPC on r and w, as the
// SDK's [mcp.IOTransport] does, but a bad line ends nothing: the SDK ends
// the session at the first line it cannot decode, and the agent loses
// every tool for the rest of its session. Here each line is checked
// first; one that is not JSON is answered with a parse error (-32700),
// one that is JSON but no JSON-RPC message the server takes (another
// version, a response without an id, a batch, a line over [MaxLine]
// bytes) with an invalid-request error (-32600), and the server reads
// on. Good lines go on to the SDK unchanged but for the whitespace
// around them. w is not closed.
func Transport(r io.Reader, w io.Writer) mcp.Transport {
	return &lineTransport{r: r, w: &lockedWriter{w: w}}
}

type lineTransport struct {
	r io.Reader
	w *lockedWriter
}

// Connect starts the filter between r and the SDK's reader.
func (t *lineTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	pr, pw := io.Pipe()
	go func() {
		pw.CloseWithError(filterLines(t.r, pw, t.w))
	}()
	return (&mcp.IOTransport{Reader: pr, Writer: t.w}).Connect(ctx)
}

// filterLines passes each good line of r to good and answers each bad one
// on reply, until r ends (nil: io.EOF for the reader) or good is closed.
func filterLines(r io.Reader, good io.Writer, reply io.Writer) error {
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := readLine(br)
		if errors.Is(err, errLineTooLong) {
			if werr := answer(reply, nil, codeInvalidRequest, fmt.Sprintf("a line longer than %d bytes", MaxLine)); werr != nil {
				return werr
			}
			continue
		}
		if len(line) > 0 {
			if msg, code, why := check(line); code != 0 {
				if werr := answer(reply, msg, code, why); werr != nil {
					return werr
				}
			} else if _, werr := good.Write(append(line, '\n')); werr != nil {
				return werr
			}
		}
		if err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
	}
}

var errLineTooLong = errors.New("line too long")

// readLine reads one line, without its end and the space around it; one
// over MaxLine is read to its end and dropped (errLineTooLong).
func readLine(br *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if len(line)+len(chunk) > MaxLine+2 { // +2: the "\r\n" may end it
			for errors.Is(err, bufio.ErrBufferFull) {
				_, err = br.ReadSlice('\n')
			}
			if err != nil && err != io.EOF {
				return nil, err
			}
			return nil, errLineTooLong
		}
		line = append(line, chunk...)
		if !errors.Is(err, bufio.ErrBufferFull) {
			return bytes.TrimSpace(line), err
		}
	}
}

// check says whether line is a JSON-RPC message the SDK takes: 0, or the
// error code and why, with the id to answer when the line has one.
func check(line []byte) (id *jsonrpc.ID, code int, why string) {
	if !json.Valid(line) {
		return nil, codeParseError, "not JSON"
	}
	if line[0] != '{' {
		// A batch (an array) is not served: the protocol has none since
		// 2025-06-18, and the SDK ends the session on one.
		return nil, codeInvalidRequest, "not a JSON-RPC message object (batches are not served)"
	}
	if _, err := jsonrpc.DecodeMessage(line); err != nil {
		var v struct {
			ID any `json:"id"`
		}
		if json.Unmarshal(line, &v) == nil {
			if i, err := jsonrpc.MakeID(v.ID); err == nil && i.IsValid() {
				id = &i
			}
		}
		return id, codeInvalidRequest, err.Error()
	}
	return nil, 0, ""
}

// answer writes a JSON-RPC error response (id null when none is known).
func answer(w io.Writer, id *jsonrpc.ID, code int, why string) error {
	var raw any // null
	if id != nil {
		raw = id.Raw()
	}
	name := "Invalid Request"
	if code == codeParseError {
		name = "Parse error"
	}
	b, err := json.Marshal(map[string]any{
		"jsonrpc": "2.0", "id": raw,
		"error": map[string]any{"code": code, "message": name + ": " + why},
	})
	if err != nil {
		return err // an id is a string or a number: it always marshals
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// lockedWriter keeps whole lines whole: the SDK writes each message in
// one Write, and so does answer, from another goroutine. Close does not
// close w (stdout is not the server's to close).
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (l *lockedWriter) Close() error { return nil }
