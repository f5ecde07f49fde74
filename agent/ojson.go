package agent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
)

// node is one JSON value of a settings file, kept in the file's order
// and with its place in the file: install and uninstall change the file
// by splicing text in and cutting text out at those places, so that every
// byte of the user's outside what they add or remove stays as it was (a
// string's escapes, a number's digits, the blanks). A node install makes
// has no place (start -1) until it is written out.
type node struct {
	line       int // where the value starts, for error messages
	start, end int // the value's bytes in the file: [start, end); -1 for a new node
	keys       []string
	keyStart   []int   // where each key's opening quote is
	vals       []*node // an object's values, in the order of keys
	elems      []*node // an array's elements
	raw        []byte  // a scalar's text, as written
	kind       byte    // '{', '[' or 0 for a scalar
}

func object() *node { return &node{kind: '{', start: -1, end: -1} }

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
	n.keyStart = append(n.keyStart, -1)
	n.vals = append(n.vals, v)
}

func (n *node) del(key string) {
	for i, k := range n.keys {
		if k == key {
			n.keys = append(n.keys[:i], n.keys[i+1:]...)
			n.keyStart = append(n.keyStart[:i], n.keyStart[i+1:]...)
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

func scalar(v any) *node { return &node{raw: marshal(v), start: -1, end: -1} }

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

// skip returns the offset of the next token from off: past the blanks
// and separators the decoder consumes before it.
func (p *parser) skip(off int64) int {
	for off < int64(len(p.data)) && strings.ContainsRune(" \t\r\n,:", rune(p.data[off])) {
		off++
	}
	return int(off)
}

func (p *parser) value() (*node, error) {
	// The offset before the token is where the previous one ended: skip
	// the blanks and separators so that the place is the value's own.
	start := p.skip(p.dec.InputOffset())
	tok, err := p.dec.Token()
	if err != nil {
		return nil, err
	}
	n := &node{line: p.line(int64(start)), start: start}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			n.kind = '{'
			seen := map[string]bool{}
			for p.dec.More() {
				ks := p.skip(p.dec.InputOffset())
				kt, err := p.dec.Token()
				if err != nil {
					return nil, err
				}
				k, _ := kt.(string) // the decoder allows only strings as keys
				if seen[k] {
					// Harnesses disagree on which of two keys counts (a
					// JavaScript harness keeps the last, a Go decoder
					// the first): hooks written into one may not run.
					return nil, fmt.Errorf("%d: duplicate key %q", p.line(int64(ks)), k)
				}
				seen[k] = true
				v, err := p.value()
				if err != nil {
					return nil, err
				}
				n.keys = append(n.keys, k)
				n.keyStart = append(n.keyStart, ks)
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
		n.end = int(p.dec.InputOffset())
	default:
		n.end = int(p.dec.InputOffset())
		n.raw = p.data[n.start:n.end] // as written: escapes and digits kept
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

// compact writes n on one line, `{"a": 1, "b": [2]}`: for a file written
// that way.
func (n *node) compact(b *bytes.Buffer) {
	switch n.kind {
	case '{':
		b.WriteByte('{')
		for i, k := range n.keys {
			if i > 0 {
				b.WriteString(", ")
			}
			b.Write(marshal(k))
			b.WriteString(": ")
			n.vals[i].compact(b)
		}
		b.WriteByte('}')
	case '[':
		b.WriteByte('[')
		for i, e := range n.elems {
			if i > 0 {
				b.WriteString(", ")
			}
			e.compact(b)
		}
		b.WriteByte(']')
	default:
		b.Write(n.raw)
	}
}

// splice is one change to a file's bytes: [start, end) becomes text.
type splice struct {
	start, end int
	text       string
}

// editor collects the splices of one install or uninstall on a file's
// bytes, and knows the file's style to write new values in it.
type editor struct {
	data    []byte
	clean   []byte // data with its comments blanked out (blankJSONC); data when it has none
	unit    string // one level of indentation
	compact bool   // the file is on one line: new values are too
	crlf    bool   // the file's lines end in CR LF: new lines too
	splices []splice
}

func newEditor(data, clean []byte, doc *node) *editor {
	e := &editor{data: data, clean: clean, unit: indentUnit(data), crlf: bytes.Contains(data, []byte("\r\n"))}
	if doc.start >= 0 {
		e.compact = !bytes.Contains(data[doc.start:doc.end], []byte("\n"))
	}
	return e
}

// lineIndent is the indentation of the line holding offset off.
func (e *editor) lineIndent(off int) string {
	ls := bytes.LastIndexByte(e.data[:off], '\n') + 1
	i := ls
	for i < off && (e.data[i] == ' ' || e.data[i] == '\t') {
		i++
	}
	return string(e.data[ls:i])
}

// render writes v as it will stand at indent: one value a line, or on
// one line for a compact file.
func (e *editor) render(v *node, indent string, compact bool) string {
	var b bytes.Buffer
	if compact {
		v.compact(&b)
	} else {
		v.write(&b, indent, e.unit)
	}
	if e.crlf {
		return strings.ReplaceAll(b.String(), "\n", "\r\n")
	}
	return b.String()
}

// childStart and childEnd are the bytes of c's i-th member (key to
// value) or element.
func childStart(c *node, i int) int {
	if c.kind == '{' {
		return c.keyStart[i]
	}
	return c.elems[i].start
}

func childEnd(c *node, i int) int {
	if c.kind == '{' {
		return c.vals[i].end
	}
	return c.elems[i].end
}

func children(c *node) int { return len(c.keys) + len(c.elems) }

// add appends children to the container c: members (keys with vals) of
// an object, or elements of an array. A container made by install takes
// them in memory; one of the file's gets them spliced in after its last
// child, each after the separator the file uses between children (so
// that uninstall, cutting each out with its separator, gives back the
// file's bytes); an empty one of the file's is written anew, at its
// line's indentation.
func (e *editor) add(c *node, keys []string, vals []*node) {
	if len(vals) == 0 {
		return
	}
	if c.start >= 0 && children(c) == 0 && e.hasComments(c.start, c.end) {
		e.addToCommented(c, keys, vals)
		return
	}
	if c.start < 0 || children(c) == 0 {
		for i, v := range vals {
			if c.kind == '{' {
				c.set(keys[i], v)
			} else {
				c.elems = append(c.elems, v)
			}
		}
		if c.start >= 0 {
			e.splices = append(e.splices, splice{c.start, c.end, e.render(c, e.lineIndent(c.start), e.compact)})
		}
		return
	}
	n := children(c)
	var sep string
	if n >= 2 {
		sep = e.between(childEnd(c, n-2), childStart(c, n-1))
	} else {
		sep = "," + e.between(c.start+1, childStart(c, 0))
	}
	// Children on lines of their own: the new ones too, at their
	// indentation; children side by side: the new one beside them.
	// The indentation is the separator's last line without what is not
	// blank in it (the comma of a file that puts commas first).
	nl := strings.LastIndexByte(sep, '\n')
	indent, compact := strings.Map(func(r rune) rune {
		if r == ' ' || r == '\t' {
			return r
		}
		return -1
	}, sep[nl+1:]), e.compact || nl < 0
	var b strings.Builder
	for i, v := range vals {
		b.WriteString(sep)
		if c.kind == '{' {
			b.Write(marshal(keys[i]))
			b.WriteString(": ")
		}
		b.WriteString(e.render(v, indent, compact))
	}
	at := childEnd(c, n-1)
	e.splices = append(e.splices, splice{at, at, b.String()})
}

// remove cuts the children of c listed in drop (ascending indices, not
// all of them) out of the file: each with the separator before it, the
// first with the one after it.
func (e *editor) remove(c *node, drop []int) {
	gone := map[int]bool{}
	for _, i := range drop {
		gone[i] = true
	}
	for _, i := range drop {
		if i > 0 {
			e.splices = append(e.splices, splice{childEnd(c, i-1), childEnd(c, i), ""})
			continue
		}
		next := 1
		for gone[next] {
			next++
		}
		e.splices = append(e.splices, splice{childStart(c, 0), childStart(c, next), ""})
	}
}

// empty cuts every child of c out, leaving `{}` or `[]` (and the
// comments there).
func (e *editor) empty(c *node) {
	if e.hasComments(c.start, c.end) {
		e.emptyCommented(c)
		return
	}
	e.splices = append(e.splices, splice{c.start + 1, c.end - 1, ""})
}

// apply returns the file's bytes with the splices made. Cuts may
// overlap (two neighbours cut out each with its separator): their union
// goes; insertions at one place keep their order.
func (e *editor) apply() []byte {
	sort.SliceStable(e.splices, func(i, j int) bool { return e.splices[i].start < e.splices[j].start })
	var b bytes.Buffer
	pos := 0
	for _, s := range e.splices {
		if s.start > pos {
			b.Write(e.data[pos:s.start])
			pos = s.start
		}
		b.WriteString(s.text)
		pos = max(pos, s.end)
	}
	b.Write(e.data[pos:])
	return b.Bytes()
}
