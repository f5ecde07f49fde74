//go:build !linux

package watch

import (
	"fmt"
	"os"
)

const supported = false

// Serve is the watcher; this system has none.
func Serve(args []string) int {
	fmt.Fprintln(os.Stderr, "snapback: no tree watcher on this system")
	return 1
}

func prepare(store string) (lock, sock *os.File, err error) { return nil, nil, ErrUnsupported }

func unprepare(store string, lock, sock *os.File) {}
