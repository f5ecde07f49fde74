// Package record holds the store's data types and their encodings,
// without a store: a manifest's entries (entry.go) and its binary codec
// (codec.go), a snapshot's record [Meta] with the parts it carries
// (targets' states, a run's steps, git heads, skipped paths) and its
// validation (meta.go), ids and how a reference names one (ids.go), and
// the difference of two manifests (diff.go).
//
// Everything decoded here is input from outside (a store can be
// damaged, copied in by a clone, or hostile; an archive comes from
// anywhere): [DecodeManifest] and [DecodeMeta] check every field, and a
// path inside the store itself (.snapback/) is refused ([ErrStorePath]).
// Package snapshot reads and writes these in a store; package catalog
// in an archive; the command prints them.
package record
