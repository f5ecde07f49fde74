package agent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// node is one JSON value of a settings file, kept in the file's order:
// a harness's settings hold the user's own keys, and rewriting them in
// Go's map order would reorder the whole file. Scalars keep their text
// (numbers as written).
type node struct {
	line  int // where the value starts, for error messages
	keys  []string
	vals  []*node // an object's values, in the order of keys
	elems []*node // an array's elements
	raw   json.RawMessage
	kind  byte // '{', '[' or 0 for a scalar
}

func object() *node { return &node{kind: '{'} }

// get returns the value of key in an object, or nil.
func (n *node) get(key string) *node {
	for i, k := range n.keys {
		if k == key {
			return n.vals[i]
		}
	}
	return nil
}

// set replaces key's value, or adds key at the end.
func (n *node) set(key string, v *node) {
	for i, k := range n.keys {
		if k == key {
			n.vals[i] = v
			return
		}
	}
	n.keys = append(n.keys, key)
	n.vals = append(n.vals, v)
}

func (n *node) del(key string) {
	for i, k := range n.keys {
		if k == key {
			n.keys = append(n.keys[:i], n.keys[i+1:]...)
			n.vals = append(n.vals[:i], n.vals[i+1:]...)
			return
		}
	}
}

// str is the value of a string scalar ("" for anything else).
func (n *node) str() string {
	var s string
	if n == nil || n.kind != 0 || json.Unmarshal(n.raw, &s) != nil {
		return ""
	}
	return s
}

func scalar(v any) *node { return &node{raw: marshal(v)} }

// marshal encodes a scalar as written by hand: without json.Marshal's
// HTML escaping, which would turn a user's `a && b` into \u0026\u0026.
func marshal(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v) // strings, numbers and bools always encode
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// parseJSON reads one JSON document; an error starts with the line
// number and a colon.
func parseJSON(data []byte) (*node, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	p := &parser{dec: dec, data: data}
	n, err := p.value()
	if err != nil {
		return nil, p.wrap(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%d: data after the JSON object", p.line(dec.InputOffset()))
	}
	return n, nil
}

type parser struct {
	dec  *json.Decoder
	data []byte
}

func (p *parser) line(off int64) int {
	if off > int64(len(p.data)) {
		off = int64(len(p.data))
	}
	return 1 + bytes.Count(p.data[:off], []byte("\n"))
}

// wrap puts the line of a syntax error in front of it.
func (p *parser) wrap(err error) error {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Errorf("%d: %s", p.line(se.Offset), se.Error())
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return fmt.Errorf("%d: unexpected end of the file", p.line(int64(len(p.data))))
	}
	return err
}

func (p *parser) value() (*node, error) {
	// The offset before the token is where the previous one ended: skip
	// the blanks and separators so that the line is the value's own.
	off := p.dec.InputOffset()
	for off < int64(len(p.data)) && strings.ContainsRune(" \t\r\n,:", rune(p.data[off])) {
		off++
	}
	tok, err := p.dec.Token()
	if err != nil {
		return nil, err
	}
	n := &node{line: p.line(off)}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			n.kind = '{'
			for p.dec.More() {
				kt, err := p.dec.Token()
				if err != nil {
					return nil, err
				}
				k, _ := kt.(string) // the decoder allows only strings as keys
				v, err := p.value()
				if err != nil {
					return nil, err
				}
				n.keys = append(n.keys, k)
				n.vals = append(n.vals, v)
			}
		case '[':
			n.kind = '['
			for p.dec.More() {
				v, err := p.value()
				if err != nil {
					return nil, err
				}
				n.elems = append(n.elems, v)
			}
		}
		if _, err := p.dec.Token(); err != nil { // the closing delimiter
			return nil, err
		}
	default:
		n.raw = marshal(t)
	}
	return n, nil
}

// encode writes n one value a line, each level indented by unit (two
// spaces, as the harnesses write their settings, or the file's own),
// ending with a newline.
func (n *node) encode(unit string) []byte {
	var b bytes.Buffer
	n.write(&b, "", unit)
	b.WriteByte('\n')
	return b.Bytes()
}

// indentUnit is the indentation of a file's first indented key: a
// rewritten file keeps it, so that the change shows as only what
// changed.
func indentUnit(data []byte) string {
	for _, l := range bytes.Split(data, []byte("\n")) {
		t := bytes.TrimLeft(l, " \t")
		if len(t) < len(l) && len(t) > 0 && t[0] == '"' {
			return string(l[:len(l)-len(t)])
		}
	}
	return "  "
}

func (n *node) write(b *bytes.Buffer, indent, unit string) {
	inner := indent + unit
	switch n.kind {
	case '{':
		if len(n.keys) == 0 {
			b.WriteString("{}")
			return
		}
		b.WriteString("{\n")
		for i, k := range n.keys {
			b.WriteString(inner)
			b.Write(marshal(k))
			b.WriteString(": ")
			n.vals[i].write(b, inner, unit)
			if i < len(n.keys)-1 {
				b.WriteByte(',')
			}
			b.WriteByte('\n')
		}
		b.WriteString(indent + "}")
	case '[':
		if len(n.elems) == 0 {
			b.WriteString("[]")
			return
		}
		b.WriteString("[\n")
		for i, e := range n.elems {
			b.WriteString(inner)
			e.write(b, inner, unit)
			if i < len(n.elems)-1 {
				b.WriteByte(',')
			}
			b.WriteByte('\n')
		}
		b.WriteString(indent + "]")
	default:
		b.Write(n.raw)
	}
}
