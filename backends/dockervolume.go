package backends

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/snapback/snapback/internal/dockerapi"
)

// DockerVolume snapshots a Docker named volume through the Engine API. No
// image is ever pulled: the helper image holds one file, snapback's own
// static executable, imported once and tagged by its digest.
//
// A snapshot runs the helper with the volume mounted read-only and
// networking off; it writes a tar of the volume (owners, modes, nanosecond
// times, xattrs, hard links, holes skipped on the way back, symlinks as
// they are) into the payload: straight into the file through a bind mount
// of the payload directory when the daemon runs on this machine, else
// streamed through the API (about half the speed on dockerd 20.10).
// CopyFromContainer of a never-started container is not used: the
// daemon's archive keeps only the security.capability xattr, and takes a
// file's size before opening it, so a file replaced meanwhile breaks it.
//
// A restore hands the tar to the helper, which extracts it into a staging
// directory inside the volume and then swaps it in (see [VolumeHelper]):
// an error or a kill leaves the volume as it was, or finishes on the next
// run. A volume that is gone is created again with its driver, options
// and labels.
//
// With stop_containers, the running containers that use the volume are
// stopped for the snapshot and the restore and started again afterwards;
// without it, files being written meanwhile are each captured whole, but
// not together.
type DockerVolume struct {
	// Helper is the static snapback executable the helper image is made
	// from; empty means $SNAPBACK_HELPER_BINARY, else this executable.
	Helper string
	// Stream sends archives through the Engine API even when the daemon
	// runs on this machine, where they would otherwise go through a bind
	// mount of the payload directory.
	Stream bool
}

var _ Backend = (*DockerVolume)(nil)

// VolumeHelperVerb is the hidden first argument that makes snapback's own
// binary the docker-volume helper: the only program in the helper image,
// run in a container with the volume mounted at /v and networking off.
const VolumeHelperVerb = "__volume-helper"

// VolumeHelper runs the helper (the arguments after VolumeHelperVerb) and
// returns its exit status; an error goes to stderr as one line.
//
//	archive DIR [OUT UID GID]     write DIR as a tar to stdout, or to the
//	                              file OUT owned by UID:GID, printing its
//	                              sha256 and size
//	restore DIR ID SHA256 [IN]    make DIR hold exactly the tar on stdin (or
//	                              in the file IN) whose sha256 is SHA256
//	recover DIR                   finish or undo an interrupted restore
//
// A restore extracts into DIR/.snapback-restore-ID/tree (refusing names
// that leave it, and never following a symlink), checks the digest,
// syncs, and marks the staging directory complete: before the mark,
// recovering removes the staging directory (the volume is as before);
// after it, recovering finishes the swap (the volume is as after). The
// swap moves the old top-level entries into DIR/.snapback-old-ID, marks
// that done, moves the staged entries in and removes the old ones; every
// restore first recovers what an earlier one left.
func VolumeHelper(args []string) int {
	if volumeHelper == nil {
		fmt.Fprintln(os.Stderr, "the docker-volume helper runs only on Linux")
		return 1
	}
	return volumeHelper(args)
}

// volumeHelper is the helper's implementation (volumehelper.go, Linux).
var volumeHelper func(args []string) int

// helperNoFile is the helper's exit status when the payload file it was
// given (through a bind mount) cannot be opened or made: the caller then
// streams the archive through the Engine API instead.
const helperNoFile = 3

const (
	volumeTar  = "volume.tar"
	volumeMeta = "volume.json"
	// helperLabel marks the helper's containers with the volume's name.
	helperLabel = "snapback.helper"
)

// volumeInfo is volume.json: what a restore needs to recreate the volume.
type volumeInfo struct {
	Volume  string            `json:"volume"`
	Driver  string            `json:"driver"`
	Labels  map[string]string `json:"labels,omitempty"`
	Options map[string]string `json:"options,omitempty"`
	Size    int64             `json:"size"`
	SHA256  string            `json:"sha256"`
}

// Name implements Backend.
func (*DockerVolume) Name() string { return "docker-volume" }

// Available implements Backend: a Docker daemon answers and the helper
// executable can run in an empty image.
func (d *DockerVolume) Available() (bool, string) {
	if _, err := d.helperPath(); err != nil {
		return false, err.Error()
	}
	cli, err := newDockerClient()
	if err != nil {
		return false, err.Error()
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := cli.Ping(ctx); err != nil {
		return false, "no Docker daemon answers: " + dockerLine(err)
	}
	return true, ""
}

// newDockerClient connects as the Docker SDK's client.FromEnv did
// (DOCKER_HOST and the rest); internal/dockerapi replaces the SDK, whose
// package initialisation every snapback process paid.
func newDockerClient() (*dockerapi.Client, error) { return dockerapi.FromEnv() }

func dockerLine(err error) string { return strings.ReplaceAll(err.Error(), "\n", " ") }

// helperPath returns the helper executable, refusing one that cannot run
// in an image holding nothing else.
func (d *DockerVolume) helperPath() (string, error) {
	p := d.Helper
	if p == "" {
		p = os.Getenv("SNAPBACK_HELPER_BINARY")
	}
	if p == "" {
		exe, err := os.Executable()
		if err != nil {
			return "", fmt.Errorf("docker-volume helper: %w", err)
		}
		p = exe
	}
	f, err := elf.Open(p)
	if err != nil {
		return "", fmt.Errorf("docker-volume helper %s is not a Linux executable: %w", p, err)
	}
	defer f.Close() // read-only
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			return "", fmt.Errorf("docker-volume helper %s is dynamically linked and cannot run in an empty image: build snapback with CGO_ENABLED=0", p)
		}
	}
	return p, nil
}

// connect opens a client and finds the target's volume: an error naming
// the target when there is no daemon or no such volume.
func dockerConnect(ctx context.Context, t Target) (*dockerapi.Client, *dockerapi.Volume, error) {
	if t.Volume == "" {
		return nil, nil, targetErr(t, "no volume")
	}
	cli, err := newDockerClient()
	if err != nil {
		return nil, nil, targetErr(t, "docker client: %s", dockerLine(err))
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := cli.Ping(pctx); err != nil {
		cli.Close()
		return nil, nil, targetErr(t, "no Docker daemon answers at %s: %s", cli.DaemonHost(), dockerLine(err))
	}
	v, err := cli.VolumeInspect(ctx, t.Volume)
	if err != nil {
		if dockerNotFound(err) {
			return cli, nil, nil
		}
		cli.Close()
		return nil, nil, targetErr(t, "volume %q: %s", t.Volume, dockerLine(err))
	}
	return cli, &v, nil
}

func dockerNotFound(err error) bool { return dockerapi.IsNotFound(err) }

// Check implements Backend: the daemon answers, the volume exists, and
// with stop_containers the containers using it can be inspected.
func (d *DockerVolume) Check(ctx context.Context, t Target, root string) error {
	cli, v, err := dockerConnect(ctx, t)
	if err != nil {
		return err
	}
	defer cli.Close()
	if v == nil {
		return targetErr(t, "Docker volume %q does not exist", t.Volume)
	}
	if t.StopContainers {
		users, err := volumeUsers(ctx, cli, t.Volume, true)
		if err != nil {
			return targetErr(t, "containers using volume %q: %s", t.Volume, dockerLine(err))
		}
		for _, id := range users {
			if _, err := cli.ContainerInspect(ctx, id); err != nil {
				return targetErr(t, "container %s using volume %q: %s", id[:12], t.Volume, dockerLine(err))
			}
		}
	}
	return nil
}

// volumeUsers lists the containers (running ones unless all) that mount
// the volume, leaving out the helper's.
func volumeUsers(ctx context.Context, cli *dockerapi.Client, vol string, all bool) ([]string, error) {
	cs, err := cli.ContainerList(ctx, all, dockerapi.Filters{"volume": {vol}})
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, c := range cs {
		if _, ok := c.Labels[helperLabel]; !ok {
			ids = append(ids, c.ID)
		}
	}
	return ids, nil
}

// stopUsers stops the running containers using the volume; the returned
// function starts them again (also those stopped before an error) and
// is safe to call more than once.
func stopUsers(ctx context.Context, cli *dockerapi.Client, vol string) (func() error, error) {
	var stopped []string
	var once sync.Once
	var rerr error
	restart := func() error {
		once.Do(func() {
			ctx := context.WithoutCancel(ctx)
			for _, id := range stopped {
				if err := cli.ContainerStart(ctx, id); err != nil && rerr == nil {
					rerr = fmt.Errorf("start container %s again: %w", id[:12], err)
				}
			}
		})
		return rerr
	}
	ids, err := volumeUsers(ctx, cli, vol, false)
	if err != nil {
		return restart, fmt.Errorf("containers using volume %q: %w", vol, err)
	}
	for _, id := range ids {
		if err := cli.ContainerStop(ctx, id); err != nil {
			return restart, fmt.Errorf("stop container %s: %w", id[:12], err)
		}
		stopped = append(stopped, id)
	}
	return restart, nil
}

// helperImages caches the digest of each helper executable by path, size
// and mtime.
var helperImages sync.Map

// HelperImage returns the reference of the helper image, importing it
// from the helper executable when the daemon does not have it yet.
func (d *DockerVolume) HelperImage(ctx context.Context, cli *dockerapi.Client) (string, error) {
	p, err := d.helperPath()
	if err != nil {
		return "", err
	}
	fi, err := os.Stat(p)
	if err != nil {
		return "", err
	}
	key := fmt.Sprintf("%s\x00%d\x00%d", p, fi.Size(), fi.ModTime().UnixNano())
	ref, ok := helperImages.Load(key)
	if !ok {
		f, err := os.Open(p)
		if err != nil {
			return "", err
		}
		h := sha256.New()
		_, err = io.Copy(h, f)
		f.Close() // read-only
		if err != nil {
			return "", err
		}
		ref = "snapback-helper:" + hex.EncodeToString(h.Sum(nil))[:12]
		helperImages.Store(key, ref)
	}
	if err := cli.ImageInspect(ctx, ref.(string)); err == nil {
		return ref.(string), nil
	} else if !dockerNotFound(err) {
		return "", fmt.Errorf("inspect helper image: %w", err)
	}
	if err := importHelper(ctx, cli, p, fi.Size(), ref.(string)); err != nil {
		return "", fmt.Errorf("import helper image %s from %s: %w", ref, p, err)
	}
	return ref.(string), nil
}

// importHelper makes an image holding only the executable, as /snapback.
func importHelper(ctx context.Context, cli *dockerapi.Client, p string, size int64, ref string) error {
	pr, pw := io.Pipe()
	go func() {
		tw := tar.NewWriter(pw)
		err := tw.WriteHeader(&tar.Header{Name: "snapback", Mode: 0o755, Size: size, ModTime: time.Unix(0, 0)})
		if err == nil {
			var f *os.File
			if f, err = os.Open(p); err == nil {
				_, err = io.CopyN(tw, f, size)
				f.Close() // read-only
			}
		}
		if err == nil {
			err = tw.Close()
		}
		pw.CloseWithError(err)
	}()
	err := cli.ImageImport(ctx, pr, ref, []string{`ENTRYPOINT ["/snapback", "` + VolumeHelperVerb + `"]`, `LABEL snapback.helper-image=1`})
	pr.CloseWithError(err) // stops the tar's writer if the daemon stopped reading first
	if err != nil {
		return err
	}
	// The import said it succeeded: the image must be there.
	if err := cli.ImageInspect(ctx, ref); err != nil {
		return fmt.Errorf("after the import: %w", err)
	}
	return nil
}

// errNoBind: the helper could not use the payload directory bound into
// its container (a daemon on another machine, in a VM, or with remapped
// users); the archive goes through the Engine API instead.
var errNoBind = errors.New("payload directory not usable in the helper container")

// runHelper runs the helper with args in a container with the volume at
// /v (read-only when readOnly) and no network, the payload directory (when
// not empty) at /p (writable when the volume is not), feeding it stdin
// (when not nil) and copying its stdout; a non-zero exit is an error
// carrying its stderr.
func runHelper(ctx context.Context, cli *dockerapi.Client, img, vol string, readOnly bool, payload string, stdin io.Reader, stdout io.Writer, args ...string) error {
	cfg := &dockerapi.Config{
		Image:           img,
		Cmd:             args,
		Labels:          map[string]string{helperLabel: vol},
		AttachStdout:    true,
		AttachStderr:    true,
		AttachStdin:     stdin != nil,
		OpenStdin:       stdin != nil,
		StdinOnce:       stdin != nil,
		NetworkDisabled: true,
	}
	hc := &dockerapi.HostConfig{
		NetworkMode: "none",
		LogConfig:   &dockerapi.LogConfig{Type: "none"}, // the archive is no log
		Mounts: []dockerapi.Mount{{Type: dockerapi.MountVolume, Source: vol, Target: "/v", ReadOnly: readOnly,
			VolumeOptions: &dockerapi.VolumeOptions{NoCopy: true}}},
	}
	if payload != "" {
		hc.Mounts = append(hc.Mounts, dockerapi.Mount{Type: dockerapi.MountBind, Source: payload, Target: "/p", ReadOnly: !readOnly})
	}
	id, err := cli.ContainerCreate(ctx, cfg, hc)
	if err != nil {
		if payload != "" {
			return fmt.Errorf("%w: %w", errNoBind, err)
		}
		return fmt.Errorf("create helper container: %w", err)
	}
	defer func() {
		// Force: a container cut short by an error is killed as well.
		_ = cli.ContainerRemove(context.WithoutCancel(ctx), id, true) // a leftover is removed by the next run (removeLeftovers)
	}()
	att, err := cli.ContainerAttach(ctx, id, dockerapi.AttachOptions{Stdin: stdin != nil, Stdout: true, Stderr: true})
	if err != nil {
		return fmt.Errorf("attach helper container: %w", err)
	}
	defer att.Close()
	// The wait is registered before the start, so the exit is not missed.
	waitC, errC := cli.ContainerWait(ctx, id, dockerapi.WaitNextExit)
	if err := cli.ContainerStart(ctx, id); err != nil {
		return fmt.Errorf("start helper container: %w", err)
	}
	if stdin != nil {
		go func() {
			_, err := io.Copy(att, stdin)
			_ = err // a short copy shows as the helper's error (a truncated archive)
			_ = att.CloseWrite()
		}()
	}
	var stderr bytes.Buffer
	_, cerr := dockerapi.StdCopy(stdout, &stderr, att)
	select {
	case res := <-waitC:
		msg := strings.TrimSpace(stderr.String())
		if res.Error != nil {
			msg += " " + res.Error.Message
		}
		if res.StatusCode == helperNoFile && payload != "" {
			return fmt.Errorf("%w: %s", errNoBind, msg)
		}
		if res.StatusCode != 0 {
			if msg == "" && res.StatusCode == 137 {
				msg = "killed"
			}
			return fmt.Errorf("helper %s exited with status %d: %s", args[0], res.StatusCode, msg)
		}
	case err := <-errC:
		return fmt.Errorf("wait for helper container: %w", err)
	}
	if cerr != nil {
		return fmt.Errorf("read helper output: %w", cerr)
	}
	return nil
}

// removeLeftovers removes helper containers of the volume that a killed
// snapback left behind (the store lock lets one call at a time work on a
// target).
func removeLeftovers(ctx context.Context, cli *dockerapi.Client, vol string) error {
	cs, err := cli.ContainerList(ctx, true, dockerapi.Filters{"label": {helperLabel + "=" + vol}})
	if err != nil {
		return fmt.Errorf("list helper containers: %w", err)
	}
	for _, c := range cs {
		if err := cli.ContainerRemove(ctx, c.ID, true); err != nil && !dockerNotFound(err) {
			return fmt.Errorf("remove leftover helper container %s: %w", c.ID[:12], err)
		}
	}
	return nil
}

// Snapshot implements Backend.
func (d *DockerVolume) Snapshot(ctx context.Context, t Target, root, dir string) (err error) {
	cli, v, err := dockerConnect(ctx, t)
	if err != nil {
		return err
	}
	defer cli.Close()
	if v == nil {
		return targetErr(t, "Docker volume %q does not exist", t.Volume)
	}
	img, err := d.HelperImage(ctx, cli)
	if err != nil {
		return fmt.Errorf("snapshot docker volume %q: %w", t.Volume, err)
	}
	if err := removeLeftovers(ctx, cli, t.Volume); err != nil {
		return fmt.Errorf("snapshot docker volume %q: %w", t.Volume, err)
	}
	restart := func() error { return nil }
	if t.StopContainers {
		restart, err = stopUsers(ctx, cli, t.Volume)
		defer func() {
			if rerr := restart(); err == nil && rerr != nil {
				err = fmt.Errorf("snapshot docker volume %q: %w", t.Volume, rerr)
			}
		}()
		if err != nil {
			return fmt.Errorf("snapshot docker volume %q: %w", t.Volume, err)
		}
	}
	sum, size, err := archiveVolume(ctx, cli, img, t.Volume, dir, !d.Stream && sameHost(ctx, cli))
	if rerr := restart(); err == nil {
		err = rerr // the containers run again as soon as the copy is made
	}
	if err != nil {
		return fmt.Errorf("snapshot docker volume %q: %w", t.Volume, err)
	}
	info := volumeInfo{Volume: v.Name, Driver: v.Driver, Labels: v.Labels, Options: v.Options, Size: size, SHA256: sum}
	js, err := json.MarshalIndent(info, "", "  ")
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, volumeMeta), append(js, '\n'), 0o600)
	}
	if err == nil {
		err = syncFile(filepath.Join(dir, volumeMeta))
	}
	if err != nil {
		return fmt.Errorf("snapshot docker volume %q: %w", t.Volume, err)
	}
	return nil
}

// archiveVolume writes the volume's archive into dir, returning its
// sha256 and size: straight into the file through a bind mount when the
// daemon runs on this machine (three times faster than the API's stream
// on dockerd 20.10), else streamed through the API.
func archiveVolume(ctx context.Context, cli *dockerapi.Client, img, vol, dir string, bind bool) (string, int64, error) {
	out := filepath.Join(dir, volumeTar)
	if abs, err := filepath.Abs(dir); err == nil && bind {
		var res bytes.Buffer
		err := runHelper(ctx, cli, img, vol, true, abs, nil, &res, "archive", "/v", "/p/"+volumeTar,
			strconv.Itoa(os.Getuid()), strconv.Itoa(os.Getgid()))
		if err == nil {
			var sum string
			var size int64
			if _, err := fmt.Sscanf(res.String(), "%64s %d", &sum, &size); err != nil {
				return "", 0, fmt.Errorf("helper archive said %q: %w", res.String(), err)
			}
			if fi, err := os.Stat(out); err == nil && fi.Size() == size {
				return sum, size, nil
			}
			// Written elsewhere: the daemon sees another filesystem
			// under the same path (snapback in a container of its own).
		} else if !errors.Is(err, errNoBind) {
			return "", 0, err
		}
		os.Remove(out) // if any: made by a helper that could not finish it
	}
	f, err := os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", 0, err
	}
	defer f.Close() // closed and checked below; this one is for errors
	h := sha256.New()
	cw := &volumeCounter{w: io.MultiWriter(f, h)}
	err = runHelper(ctx, cli, img, vol, true, "", nil, cw, "archive", "/v")
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return hex.EncodeToString(h.Sum(nil)), cw.n, err
}

// sameHost reports whether the daemon runs on this machine, so that a
// directory here can be bound into a container as it is.
func sameHost(ctx context.Context, cli *dockerapi.Client) bool {
	if !strings.HasPrefix(cli.DaemonHost(), "unix://") {
		return false
	}
	info, err := cli.Info(ctx)
	host, herr := os.Hostname()
	return err == nil && herr == nil && info.Name == host
}

type volumeCounter struct {
	w io.Writer
	n int64
}

func (c *volumeCounter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// Restore implements Backend. A volume that is gone is created again with
// the driver, options and labels it had.
func (d *DockerVolume) Restore(ctx context.Context, t Target, root, dir string) (err error) {
	js, err := os.ReadFile(filepath.Join(dir, volumeMeta))
	if err != nil {
		return fmt.Errorf("restore docker volume %q: %w", t.Volume, err)
	}
	var info volumeInfo
	if err := json.Unmarshal(js, &info); err != nil || len(info.SHA256) != 64 {
		return fmt.Errorf("restore docker volume %q: %s is damaged (%v)", t.Volume, volumeMeta, err)
	}
	f, err := os.Open(filepath.Join(dir, volumeTar))
	if err != nil {
		return fmt.Errorf("restore docker volume %q: %w", t.Volume, err)
	}
	defer f.Close() // read-only
	cli, v, err := dockerConnect(ctx, t)
	if err != nil {
		return err
	}
	defer cli.Close()
	img, err := d.HelperImage(ctx, cli)
	if err != nil {
		return fmt.Errorf("restore docker volume %q: %w", t.Volume, err)
	}
	if err := removeLeftovers(ctx, cli, t.Volume); err != nil {
		return fmt.Errorf("restore docker volume %q: %w", t.Volume, err)
	}
	if v == nil {
		_, err := cli.VolumeCreate(ctx, dockerapi.VolumeCreateOptions{Name: t.Volume, Driver: info.Driver, DriverOpts: info.Options, Labels: info.Labels})
		if err != nil {
			return fmt.Errorf("restore docker volume %q: create it again: %w", t.Volume, err)
		}
	}
	if t.StopContainers {
		var restart func() error
		restart, err = stopUsers(ctx, cli, t.Volume)
		defer func() {
			if rerr := restart(); err == nil && rerr != nil {
				err = fmt.Errorf("restore docker volume %q: %w", t.Volume, rerr)
			}
		}()
		if err != nil {
			return fmt.Errorf("restore docker volume %q: %w", t.Volume, err)
		}
	}
	id := info.SHA256[:16]
	err = errNoBind
	if abs, aerr := filepath.Abs(dir); aerr == nil && !d.Stream && sameHost(ctx, cli) {
		err = runHelper(ctx, cli, img, t.Volume, false, abs, nil, io.Discard, "restore", "/v", id, info.SHA256, "/p/"+volumeTar)
	}
	if errors.Is(err, errNoBind) {
		err = runHelper(ctx, cli, img, t.Volume, false, "", f, io.Discard, "restore", "/v", id, info.SHA256)
	}
	if err != nil {
		// The helper undoes its own failures; one that was killed left a
		// staging directory: undo it (or finish past the commit point).
		if rerr := runHelper(context.WithoutCancel(ctx), cli, img, t.Volume, false, "", nil, io.Discard, "recover", "/v"); rerr != nil {
			err = fmt.Errorf("%w (and recovering: %v)", err, rerr)
		}
		return fmt.Errorf("restore docker volume %q: %w", t.Volume, err)
	}
	return nil
}

// Release implements Backend: a payload is only its files (the helper
// image is shared by every snapshot).
func (*DockerVolume) Release(context.Context, Target, string, string) error { return nil }
