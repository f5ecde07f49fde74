//go:build snapback_testseams

package main

import "github.com/snapback/snapback/fsutil"

// A binary built with -tags snapback_testseams (the crash tests build one
// to kill) reads the test switches; a released one never does.
func init() { fsutil.EnableTestSeams() }
