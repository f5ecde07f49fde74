// Package man holds snapback's man pages, one per verb, made from the
// commands by `go generate ./cmd/snapback` (a test there checks that
// they match): `snapback completion --install` writes them from here.
package man

import "embed"

// Pages holds the pages, snapback.1 and snapback-VERB.1, at its top.
//
//go:embed *.1
var Pages embed.FS
