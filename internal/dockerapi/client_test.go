package dockerapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/volume"
	"github.com/docker/docker/client"
	"github.com/snapback/snapback/internal/treetest"
)

// daemon returns a client of the environment's daemon and the Docker
// SDK's client of the same, the tests' independent oracle; it skips or
// fails (by SNAPBACK_REQUIRE) where no daemon answers.
func daemon(t *testing.T) (*Client, *client.Client) {
	t.Helper()
	cli, err := FromEnv()
	treetest.Must(t, err)
	t.Cleanup(func() { cli.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := cli.Ping(ctx); !treetest.Require(t, "docker", err == nil, "no Docker daemon answers: "+errText(err)) {
		t.Skip("SNAPBACK_REQUIRE does not name docker")
	}
	sdk, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	treetest.Must(t, err)
	t.Cleanup(func() { sdk.Close() })
	return cli, sdk
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func randomName(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// TestVersionNegotiation: the version is the lower of the daemon's and
// MaxVersion, as the SDK's negotiation makes it; DOCKER_API_VERSION pins
// one (the daemon then answers in it), and one too old is refused.
func TestVersionNegotiation(t *testing.T) {
	cli, sdk := daemon(t)
	ctx := context.Background()
	ping, err := sdk.Ping(ctx)
	treetest.Must(t, err)
	want := ping.APIVersion
	if versionLess(MaxVersion, want) {
		want = MaxVersion
	}
	got, err := cli.Version(ctx)
	treetest.Must(t, err)
	if got != want {
		t.Errorf("negotiated %s; the daemon speaks up to %s, this client up to %s", got, ping.APIVersion, MaxVersion)
	}
	sdkInfo, err := sdk.Info(ctx)
	treetest.Must(t, err)
	info, err := cli.Info(ctx)
	treetest.Must(t, err)
	if info.Name == "" || info.Name != sdkInfo.Name {
		t.Errorf("Info: name %q, the SDK's %q", info.Name, sdkInfo.Name)
	}

	t.Setenv("DOCKER_API_VERSION", MinVersion)
	pinned, err := FromEnv()
	treetest.Must(t, err)
	defer pinned.Close()
	if v, err := pinned.Version(ctx); v != MinVersion || err != nil {
		t.Errorf("pinned to %s: %s %v", MinVersion, v, err)
	}
	if _, err := pinned.Info(ctx); err != nil {
		t.Errorf("Info in API %s: %v", MinVersion, err)
	}
	t.Setenv("DOCKER_API_VERSION", "1.24")
	if _, err := FromEnv(); err == nil || !strings.Contains(err.Error(), MinVersion) {
		t.Errorf("DOCKER_API_VERSION=1.24: %v", err)
	}
}

// TestDaemonErrors: a 404 is not-found and carries the daemon's message;
// another error (a version the daemon does not speak) carries its status
// and message, on one line, and is not not-found.
func TestDaemonErrors(t *testing.T) {
	cli, _ := daemon(t)
	ctx := context.Background()
	missing := randomName("snapback-test-missing-")
	_, err := cli.VolumeInspect(ctx, missing)
	t.Logf("inspect of a missing volume: %v", err)
	if !IsNotFound(err) || !strings.Contains(strings.ToLower(err.Error()), "no such volume") || !strings.Contains(err.Error(), missing) {
		t.Errorf("inspect of a missing volume: %v", err)
	}
	for what, err := range map[string]error{
		"image":            cli.ImageInspect(ctx, missing+":latest"),
		"container":        func() error { _, err := cli.ContainerInspect(ctx, missing); return err }(),
		"container remove": cli.ContainerRemove(ctx, missing, true),
		"container start":  cli.ContainerStart(ctx, missing),
	} {
		if !IsNotFound(err) {
			t.Errorf("%s %s: %v", what, missing, err)
		}
	}

	// The daemon refuses a version newer than its own: 400, and why.
	t.Setenv("DOCKER_API_VERSION", "1.999")
	tooNew, err := FromEnv()
	treetest.Must(t, err)
	defer tooNew.Close()
	_, err = tooNew.Info(ctx)
	t.Logf("a version the daemon does not speak: %v", err)
	var de *Error
	if !errors.As(err, &de) || de.StatusCode != http.StatusBadRequest || !strings.Contains(de.Message, "1.999") ||
		!strings.Contains(err.Error(), "too new") || strings.Contains(err.Error(), "\n") || IsNotFound(err) {
		t.Errorf("a version the daemon does not speak: %#v", err)
	}
}

// TestVolumes: a volume made with a driver, options and labels reads back
// the same, through the SDK too; the list of its containers filters by
// volume and label.
func TestVolumes(t *testing.T) {
	cli, sdk := daemon(t)
	ctx := context.Background()
	name := randomName("snapback-test-")
	labels := map[string]string{"snapback.test": t.Name(), "with space": "a=b"}
	opts := map[string]string{"type": "tmpfs", "device": "tmpfs", "o": "size=1m"}
	v, err := cli.VolumeCreate(ctx, VolumeCreateOptions{Name: name, Driver: "local", DriverOpts: opts, Labels: labels})
	treetest.Must(t, err)
	t.Cleanup(func() {
		if err := sdk.VolumeRemove(context.Background(), name, true); err != nil {
			t.Errorf("remove volume %s: %v", name, err)
		}
	})
	var oracle volume.Volume
	oracle, err = sdk.VolumeInspect(ctx, name)
	treetest.Must(t, err)
	got, err := cli.VolumeInspect(ctx, name)
	treetest.Must(t, err)
	for _, w := range []Volume{v, got} {
		if w.Name != name || w.Driver != "local" || w.Mountpoint != oracle.Mountpoint ||
			len(w.Labels) != 2 || w.Labels["with space"] != "a=b" || w.Options["o"] != "size=1m" || len(w.Options) != 3 {
			t.Errorf("volume %+v; the SDK's %+v", w, oracle)
		}
	}
	cs, err := cli.ContainerList(ctx, true, Filters{"volume": {name}, "label": {"snapback.test=" + t.Name()}})
	treetest.Must(t, err)
	if len(cs) != 0 {
		t.Errorf("containers of a new volume: %v", cs)
	}
}

// TestNoDaemon: a socket that does not exist is a clear, one-line error
// naming it; an address snapback cannot dial is refused at once.
func TestNoDaemon(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "no-docker.sock")
	t.Setenv("DOCKER_HOST", "unix://"+sock)
	cli, err := FromEnv()
	treetest.Must(t, err)
	defer cli.Close()
	if cli.DaemonHost() != "unix://"+sock {
		t.Errorf("DaemonHost %q", cli.DaemonHost())
	}
	err = cli.Ping(context.Background())
	t.Logf("ping of a missing socket: %v", err)
	if err == nil || !strings.Contains(err.Error(), sock) || !strings.Contains(err.Error(), "no such file") ||
		strings.Contains(err.Error(), "\n") || IsNotFound(err) {
		t.Errorf("ping of a missing socket: %v", err)
	}
	if _, err := cli.VolumeInspect(context.Background(), "v"); err == nil || !strings.Contains(err.Error(), sock) {
		t.Errorf("a request to a missing socket: %v", err)
	}
	// A name that would change the request's path is refused before
	// anything is asked.
	for _, name := range []string{"", "..", "../containers/x/json", "a/b"} {
		if _, err := cli.VolumeInspect(context.Background(), name); err == nil || !strings.Contains(err.Error(), "not a Docker volume name") {
			t.Errorf("volume %q: %v", name, err)
		}
	}
	for _, host := range []string{"ssh://me@host", "unix://", "/var/run/docker.sock"} {
		t.Setenv("DOCKER_HOST", host)
		if _, err := FromEnv(); err == nil || !strings.Contains(err.Error(), host) {
			t.Errorf("DOCKER_HOST=%s: %v", host, err)
		}
	}
	t.Setenv("DOCKER_HOST", "")
	cli, err = FromEnv()
	treetest.Must(t, err)
	if cli.DaemonHost() != DefaultHost {
		t.Errorf("DaemonHost without DOCKER_HOST: %q", cli.DaemonHost())
	}
}

// TestCancelled: a cancelled context aborts a request.
func TestCancelled(t *testing.T) {
	cli, _ := daemon(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := cli.Info(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Info with a cancelled context: %v", err)
	}
}
