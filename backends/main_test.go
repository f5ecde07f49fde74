//go:build linux

package backends_test

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/docker/docker/api/types/image"
	"github.com/snapback/snapback/backends"
)

// TestMain lets the test binary be the docker-volume helper, as snapback's
// own binary is: the helper image is made from a static build of this
// test binary (go test -c with CGO_ENABLED=0, cached by the build cache),
// which dispatches the helper verb here, plus the verbs of the tests'
// own containers (volumeTestVerbs).
func TestMain(m *testing.M) {
	if dsn := os.Getenv("SNAPBACK_MYSQL_HELPER_DSN"); dsn != "" {
		os.Exit(mysqlRestoreHelper(dsn))
	}
	if len(os.Args) > 2 && os.Args[1] == backends.VolumeHelperVerb {
		if f, ok := volumeTestVerbs[os.Args[2]]; ok {
			os.Exit(f(os.Args[3:]))
		}
		os.Exit(backends.VolumeHelper(os.Args[2:]))
	}
	cleanup := staticHelper()
	code := m.Run()
	cleanup()
	os.Exit(code)
}

// staticHelper points SNAPBACK_HELPER_BINARY at a static build of this
// test binary when a Docker daemon answers and none is set; it returns
// what removes the build and the image made from it. Random bytes after
// the ELF make the build's digest, so the image's tag, this run's own:
// Go builds are reproducible, and two runs at once must not remove each
// other's image.
func staticHelper() func() {
	if os.Getenv("SNAPBACK_HELPER_BINARY") != "" {
		return func() {}
	}
	cli, err := dockerClient()
	if err != nil {
		return func() {}
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := cli.Ping(ctx); err != nil {
		return func() {} // Available says why; the tests skip or fail by SNAPBACK_REQUIRE
	}
	dir, err := os.MkdirTemp("", "snapback-helper-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "docker-volume helper:", err)
		return func() {}
	}
	bin := filepath.Join(dir, "snapback")
	if err := buildHelper(bin); err != nil {
		fmt.Fprintln(os.Stderr, "docker-volume helper:", err)
		os.RemoveAll(dir)
		return func() {}
	}
	os.Setenv("SNAPBACK_HELPER_BINARY", bin)
	return func() {
		// Best effort: a leftover image only takes space.
		if b, err := os.ReadFile(bin); err == nil {
			sum := sha256.Sum256(b)
			if cli, err := dockerClient(); err == nil {
				_, _ = cli.ImageRemove(context.Background(), "snapback-helper:"+hex.EncodeToString(sum[:])[:12], image.RemoveOptions{Force: true, PruneChildren: true})
				cli.Close()
			}
		}
		os.RemoveAll(dir)
	}
}

// buildHelper makes bin: this test binary when it is static, else a
// static build of it (go test -c, cached by the build cache); then the
// random tail.
func buildHelper(bin string) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	if isStatic(exe) {
		b, err := os.ReadFile(exe)
		if err == nil {
			err = os.WriteFile(bin, b, 0o755)
		}
		if err != nil {
			return err
		}
	} else {
		// go test puts its own go first in PATH.
		cmd := exec.Command("go", "test", "-c", "-o", bin, "github.com/snapback/snapback/backends")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go test -c: %v\n%s", err, out)
		}
	}
	f, err := os.OpenFile(bin, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	tail := make([]byte, 16)
	_, _ = rand.Read(tail) // never fails (crypto/rand)
	if _, err := f.Write(tail); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func isStatic(p string) bool {
	f, err := elf.Open(p)
	if err != nil {
		return false
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			return false
		}
	}
	return true
}
