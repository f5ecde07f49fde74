package catalog

import (
	"archive/zip"
	"bufio"
	"bytes"
	"encoding/binary"
	"io"
	"time"
	"unicode/utf8"
)

// The layout check makes every byte of an archive either part of an
// entry's content (which the index hashes) or a byte of zip structure
// fixed by what create writes: the file is exactly, from offset 0, each
// entry's local header, content and data descriptor in turn, then the
// central directory, then (past 65,534 entries or 4 GiB) the zip64 end
// records, then the end record with no comment. The local header, the
// descriptor and the central record of an entry must agree field by
// field; the only extra field is the modification time (and zip64's
// sizes where needed); the time is the archive's created_at. So data
// prepended, appended, in a comment or an extra field, a second name in
// a local header, or two directory records sharing one entry are refused.

const (
	sigLocal    = 0x04034b50
	sigCentral  = 0x02014b50
	sigDesc     = 0x08074b50
	sigEnd      = 0x06054b50
	sigEnd64    = 0x06064b50
	sigLoc64    = 0x07064b50
	localLen    = 30
	centralLen  = 46
	endLen      = 22
	end64Len    = 56
	loc64Len    = 20
	extTimeID   = 0x5455
	zip64ID     = 0x0001
	extTimeLen  = 9 // id, size, flags, mtime
	maxU16      = 0xffff
	maxU32      = 0xffffffff
	version20   = 20
	version45   = 45
	flagDesc    = 0x8
	flagUTF8    = 0x800
	descLen     = 16
	desc64Len   = 24
	zip64ExtLen = 28
)

// layout is what the layout check learned: the entries' common time.
type layout struct {
	dosDate, dosTime uint16
	mtime            uint32
	hasTime          bool
}

// entryRec is one central directory record as read from the file.
type entryRec struct {
	name             string
	flags, method    uint16
	readerVersion    uint16
	dosTime, dosDate uint16
	crc              uint32
	csize, usize     uint64
	offset           uint64
	zip64            bool
	extTime          []byte
}

func le16(b []byte) uint16 { return binary.LittleEndian.Uint16(b) }
func le32(b []byte) uint32 { return binary.LittleEndian.Uint32(b) }
func le64(b []byte) uint64 { return binary.LittleEndian.Uint64(b) }

// checkLayout checks the whole file against the entries Go's reader
// found (files, in central directory order).
func checkLayout(ra io.ReaderAt, size int64, files []*zip.File) (*layout, error) {
	bad := func(format string, a ...any) (*layout, error) {
		return nil, errf(CodeBadZip, "layout: "+format, a...)
	}
	if size < endLen {
		return bad("too short")
	}
	// The end record: the file's last 22 bytes, no comment.
	var end [endLen]byte
	if _, err := ra.ReadAt(end[:], size-endLen); err != nil {
		return nil, wrap(CodeIO, err, "read")
	}
	if le32(end[0:]) != sigEnd || le16(end[4:]) != 0 || le16(end[6:]) != 0 || le16(end[8:]) != le16(end[10:]) {
		return bad("the file does not end with a zip end record (data after it, or a comment)")
	}
	if le16(end[20:]) != 0 {
		return bad("the zip comment is not empty")
	}
	records, cdSize, cdOff := uint64(le16(end[10:])), uint64(le32(end[12:])), uint64(le32(end[16:]))
	cdEnd := uint64(size - endLen)
	if records == maxU16 || cdSize == maxU32 || cdOff == maxU32 {
		if records != maxU16 || cdSize != maxU32 || cdOff != maxU32 || size < endLen+loc64Len+end64Len {
			return bad("a partial zip64 end record")
		}
		var b [end64Len + loc64Len]byte
		at := size - endLen - loc64Len - end64Len
		if _, err := ra.ReadAt(b[:], at); err != nil {
			return nil, wrap(CodeIO, err, "read")
		}
		e, l := b[:end64Len], b[end64Len:]
		if le32(l) != sigLoc64 || le32(l[4:]) != 0 || le64(l[8:]) != uint64(at) || le32(l[16:]) != 1 {
			return bad("the zip64 locator is not where it belongs")
		}
		if le32(e) != sigEnd64 || le64(e[4:]) != end64Len-12 || le16(e[12:]) != version45 || le16(e[14:]) != version45 ||
			le32(e[16:]) != 0 || le32(e[20:]) != 0 || le64(e[24:]) != le64(e[32:]) {
			return bad("a malformed zip64 end record")
		}
		records, cdSize, cdOff = le64(e[24:]), le64(e[40:]), le64(e[48:])
		cdEnd = uint64(at)
	} else if records >= maxU16 || cdSize >= maxU32 || cdOff >= maxU32 {
		return bad("zip64 values without a zip64 end record")
	}
	if records != uint64(len(files)) || cdOff > cdEnd || cdEnd-cdOff != cdSize {
		return bad("the central directory does not fill the space before the end record")
	}
	// The central directory, record by record.
	br := bufio.NewReaderSize(io.NewSectionReader(ra, int64(cdOff), int64(cdSize)), 64<<10)
	recs := make([]entryRec, 0, len(files))
	var hdr [centralLen]byte
	for i, zf := range files {
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			return bad("central record %d: %v", i, err)
		}
		h := hdr[:]
		nameLen, extraLen, commentLen := int(le16(h[28:])), int(le16(h[30:])), int(le16(h[32:]))
		if le32(h) != sigCentral || le16(h[4:]) != version20 || commentLen != 0 || le16(h[34:]) != 0 || le16(h[36:]) != 0 || le32(h[38:]) != 0 {
			return bad("central record %d (%q): not as written (version, comment, disk or attributes)", i, zf.Name)
		}
		rest := make([]byte, nameLen+extraLen)
		if _, err := io.ReadFull(br, rest); err != nil {
			return bad("central record %d: %v", i, err)
		}
		r := entryRec{name: string(rest[:nameLen]), readerVersion: le16(h[6:]), flags: le16(h[8:]), method: le16(h[10:]),
			dosTime: le16(h[12:]), dosDate: le16(h[14:]), crc: le32(h[16:]), csize: uint64(le32(h[20:])), usize: uint64(le32(h[24:])), offset: uint64(le32(h[42:]))}
		if r.name != zf.Name {
			return bad("central record %d: name differs from the reader's", i)
		}
		extra := rest[nameLen:]
		if len(extra) < extTimeLen || le16(extra) != extTimeID || le16(extra[2:]) != 5 || extra[4] != 1 {
			return bad("entry %q: the extra field is not the modification time alone", r.name)
		}
		r.extTime, extra = extra[:extTimeLen], extra[extTimeLen:]
		if len(extra) > 0 {
			if len(extra) != zip64ExtLen || le16(extra) != zip64ID || le16(extra[2:]) != 24 || r.csize != maxU32 || r.usize != maxU32 {
				return bad("entry %q: an extra field that is not zip64 sizes", r.name)
			}
			r.usize, r.csize = le64(extra[4:]), le64(extra[12:])
			if r.offset != maxU32 && le64(extra[20:]) != r.offset {
				return bad("entry %q: two offsets", r.name)
			}
			r.offset = le64(extra[20:])
			r.zip64 = r.csize >= maxU32 || r.usize >= maxU32
			if !r.zip64 && r.offset < maxU32 {
				return bad("entry %q: a zip64 field it does not need", r.name)
			}
		} else if r.csize == maxU32 || r.usize == maxU32 || r.offset == maxU32 {
			return bad("entry %q: zip64 values without a zip64 field", r.name)
		}
		wantVersion := uint16(version20)
		if r.zip64 {
			wantVersion = version45
		}
		wantFlags := uint16(flagDesc)
		if !utf8.ValidString(r.name) {
			return bad("entry %q: the name is not UTF-8", r.name)
		}
		for j := 0; j < len(r.name); j++ {
			if r.name[j] >= 0x80 {
				wantFlags |= flagUTF8
				break
			}
		}
		if r.readerVersion != wantVersion || r.flags != wantFlags || r.method != zip.Store || r.csize != r.usize ||
			r.csize != zf.CompressedSize64 || r.usize != zf.UncompressedSize64 || r.crc != zf.CRC32 {
			return bad("entry %q: the central record is not as written (version, flags, method or sizes)", r.name)
		}
		recs = append(recs, r)
	}
	if n, _ := br.Read(hdr[:1]); n != 0 {
		return bad("data after the last central record")
	}
	// The entries, in order from offset 0, each right after the last.
	lay := &layout{}
	var at uint64
	for _, r := range recs {
		if r.offset != at {
			return bad("entry %q starts at %d, not at %d where the previous one ends (data between entries, or entries sharing bytes)", r.name, r.offset, at)
		}
		lh := make([]byte, localLen+len(r.name)+extTimeLen)
		if _, err := ra.ReadAt(lh, int64(at)); err != nil {
			return bad("entry %q: local header: %v", r.name, err)
		}
		if le32(lh) != sigLocal || le16(lh[4:]) != version20 || le16(lh[6:]) != r.flags || le16(lh[8:]) != r.method ||
			le16(lh[10:]) != r.dosTime || le16(lh[12:]) != r.dosDate || le32(lh[14:]) != 0 || le32(lh[18:]) != 0 || le32(lh[22:]) != 0 ||
			int(le16(lh[26:])) != len(r.name) || le16(lh[28:]) != extTimeLen {
			return bad("entry %q: the local header disagrees with the central directory", r.name)
		}
		if string(lh[localLen:localLen+len(r.name)]) != r.name || !bytes.Equal(lh[localLen+len(r.name):], r.extTime) {
			return bad("entry %q: the local header's name or time disagrees with the central directory", r.name)
		}
		dataEnd := at + uint64(len(lh)) + r.csize
		dl := descLen
		if r.zip64 {
			dl = desc64Len
		}
		if dataEnd+uint64(dl) > cdOff {
			return bad("entry %q runs into the central directory", r.name)
		}
		d := make([]byte, dl)
		if _, err := ra.ReadAt(d, int64(dataEnd)); err != nil {
			return bad("entry %q: data descriptor: %v", r.name, err)
		}
		ok := le32(d) == sigDesc && le32(d[4:]) == r.crc
		if r.zip64 {
			ok = ok && le64(d[8:]) == r.csize && le64(d[16:]) == r.usize
		} else {
			ok = ok && uint64(le32(d[8:])) == r.csize && uint64(le32(d[12:])) == r.usize
		}
		if !ok {
			return bad("entry %q: the data descriptor disagrees with the central directory", r.name)
		}
		mt := le32(r.extTime[5:])
		if !lay.hasTime {
			lay.dosDate, lay.dosTime, lay.mtime, lay.hasTime = r.dosDate, r.dosTime, mt, true
		} else if lay.dosDate != r.dosDate || lay.dosTime != r.dosTime || lay.mtime != mt {
			return bad("entry %q: its time differs from the other entries'", r.name)
		}
		at = dataEnd + uint64(dl)
	}
	if at != cdOff {
		return bad("%d bytes between the last entry and the central directory", cdOff-at)
	}
	return lay, nil
}

// matches reports whether the entries' time is t, as create writes it.
func (l *layout) matches(t time.Time) bool {
	if !l.hasTime {
		return true
	}
	t = t.UTC()
	date := uint16(t.Day() + int(t.Month())<<5 + (t.Year()-1980)<<9)
	tm := uint16(t.Second()/2 + t.Minute()<<5 + t.Hour()<<11)
	return l.dosDate == date && l.dosTime == tm && l.mtime == uint32(t.Unix())
}
