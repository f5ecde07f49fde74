//go:build linux

package backends_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/snapback/snapback/internal/dockerapi"
	"github.com/snapback/snapback/internal/treetest"
)

// TestDockerAPIAttach: snapback's Engine API client runs a container of
// the helper image attached, waits for its next exit, feeds its stdin,
// half-closes it, and reads its stdout and stderr apart; over the unix
// socket, over tcp://, and over tcp:// with TLS both ways (the shared
// daemon listens on its socket alone, so a forwarder in this test, which
// only copies bytes, stands for its tcp listener).
func TestDockerAPIAttach(t *testing.T) {
	cli := testDocker(t)
	img := helperImage(t)
	sock, ok := strings.CutPrefix(cli.DaemonHost(), "unix://")
	if !treetest.Require(t, "docker", ok, "the daemon is at "+cli.DaemonHost()+", not on a unix socket, which this test forwards tcp to") {
		t.Skip("SNAPBACK_REQUIRE does not name docker")
	}
	t.Run("unix", func(t *testing.T) {
		t.Setenv("DOCKER_HOST", "unix://"+sock)
		testAttach(t, img)
	})
	t.Run("tcp", func(t *testing.T) {
		t.Setenv("DOCKER_HOST", "tcp://"+forward(t, sock, nil))
		testAttach(t, img)
	})
	t.Run("tls", func(t *testing.T) {
		server, certs := tlsFiles(t)
		t.Setenv("DOCKER_HOST", "tcp://"+forward(t, sock, server))
		t.Setenv("DOCKER_CERT_PATH", certs)
		t.Setenv("DOCKER_TLS_VERIFY", "1")
		testAttach(t, img)
		// Another CA's ca.pem: the daemon's certificate is refused.
		other, _ := tlsFiles(t)
		t.Setenv("DOCKER_HOST", "tcp://"+forward(t, sock, other))
		api, err := dockerapi.FromEnv()
		treetest.Must(t, err)
		defer api.Close()
		if err := api.Ping(context.Background()); err == nil || !strings.Contains(err.Error(), "certificate") {
			t.Errorf("a daemon whose certificate another CA signed: %v", err)
		}
	})
}

// helperContainer creates a container of the helper image running verb,
// with stdin open when stdin, removed (through the SDK) when the test
// ends.
func helperContainer(t *testing.T, api *dockerapi.Client, img string, stdin bool, verb string) string {
	t.Helper()
	id, err := api.ContainerCreate(context.Background(), &dockerapi.Config{
		Image: img, Cmd: []string{verb}, Labels: map[string]string{"snapback.test": t.Name()},
		AttachStdout: true, AttachStderr: true, AttachStdin: stdin, OpenStdin: stdin, StdinOnce: stdin, NetworkDisabled: true,
	}, &dockerapi.HostConfig{NetworkMode: "none", LogConfig: &dockerapi.LogConfig{Type: "none"}})
	treetest.Must(t, err)
	t.Cleanup(func() {
		if err := testDocker(t).ContainerRemove(context.Background(), id, container.RemoveOptions{Force: true}); err != nil {
			t.Errorf("remove container: %v", err)
		}
	})
	return id
}

func testAttach(t *testing.T, img string) {
	api, err := dockerapi.FromEnv()
	treetest.Must(t, err)
	defer api.Close()
	ctx := context.Background()
	id := helperContainer(t, api, img, true, "test-cat")
	att, err := api.ContainerAttach(ctx, id, dockerapi.AttachOptions{Stdin: true, Stdout: true, Stderr: true})
	treetest.Must(t, err)
	defer att.Close()
	waitC, errC := api.ContainerWait(ctx, id, dockerapi.WaitNextExit)
	treetest.Must(t, api.ContainerStart(ctx, id))
	in := make([]byte, 3<<20+17)
	_, _ = rand.Read(in)
	// From a file, as a restore feeds the helper: a sendfile on a plain
	// socket (through Hijacked.SyscallConn), writes through TLS.
	src := filepath.Join(t.TempDir(), "in")
	treetest.Must(t, os.WriteFile(src, in, 0o600))
	f, err := os.Open(src)
	treetest.Must(t, err)
	defer f.Close() // read-only
	werr := make(chan error, 1)
	go func() {
		_, err := io.Copy(att, f)
		werr <- errors.Join(err, att.CloseWrite())
	}()
	var out, stderr bytes.Buffer
	_, err = dockerapi.StdCopy(&out, &stderr, att)
	treetest.Must(t, err)
	treetest.Must(t, <-werr)
	if !bytes.Equal(out.Bytes(), in) {
		t.Errorf("stdout: %d bytes, sent %d", out.Len(), len(in))
	}
	if want := fmt.Sprintf("copied %d bytes (<nil>)\n", len(in)); stderr.String() != want {
		t.Errorf("stderr %q, want %q", stderr.String(), want)
	}
	select {
	case res := <-waitC:
		if res.StatusCode != 7 || res.Error != nil {
			t.Errorf("exit: %+v", res)
		}
	case err := <-errC:
		t.Fatalf("wait: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("no exit")
	}
	st, err := api.ContainerInspect(ctx, id)
	treetest.Must(t, err)
	if st.ID != id || st.State == nil || st.State.Running {
		t.Errorf("inspect after the exit: %+v", st)
	}
}

// TestDockerAPICancel: cancelling the context ends an attached stream
// and a wait of a container that would run on, promptly and with the
// context's error.
func TestDockerAPICancel(t *testing.T) {
	testDocker(t)
	img := helperImage(t)
	api, err := dockerapi.FromEnv()
	treetest.Must(t, err)
	defer api.Close()
	id := helperContainer(t, api, img, false, "test-sleep")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	att, err := api.ContainerAttach(ctx, id, dockerapi.AttachOptions{Stdout: true, Stderr: true})
	treetest.Must(t, err)
	defer att.Close()
	waitC, errC := api.ContainerWait(ctx, id, dockerapi.WaitNextExit)
	treetest.Must(t, api.ContainerStart(ctx, id))
	time.AfterFunc(200*time.Millisecond, cancel)
	start := time.Now()
	_, err = dockerapi.StdCopy(io.Discard, io.Discard, att)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("attached stream after the cancel: %v", err)
	}
	select {
	case res := <-waitC:
		t.Errorf("the wait ended with an exit: %+v", res)
	case err := <-errC:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("wait after the cancel: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("the wait went on after the cancel")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("ended %v after the cancel", d)
	}
	st, err := api.ContainerInspect(context.Background(), id)
	treetest.Must(t, err)
	if st.State == nil || !st.State.Running {
		t.Errorf("the container stopped: %+v", st.State)
	}
}

// forward listens on a loopback port (with TLS when server is not nil)
// and copies each connection to and from the daemon's socket, half-closes
// included; it returns the address.
func forward(t *testing.T, sock string, server *tls.Config) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	treetest.Must(t, err)
	if server != nil {
		ln = tls.NewListener(ln, server)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				d, err := net.Dial("unix", sock)
				if err != nil {
					return
				}
				defer d.Close()
				done := make(chan struct{})
				go func() {
					_, _ = io.Copy(d, c) // an error ends the connection as EOF would
					_ = d.(*net.UnixConn).CloseWrite()
					close(done)
				}()
				_, _ = io.Copy(c, d)
				c.Close() // ends the other direction too, if the client has not
				<-done
			}()
		}
	}()
	return ln.Addr().String()
}

// tlsFiles makes a CA, a certificate of 127.0.0.1 it signs for the
// daemon's side and one for the client; it returns the daemon side's
// TLS configuration (which requires the client's certificate) and a
// directory of ca.pem, cert.pem and key.pem as DOCKER_CERT_PATH wants.
func tlsFiles(t *testing.T) (*tls.Config, string) {
	t.Helper()
	dir := t.TempDir()
	key := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		treetest.Must(t, err)
		return k
	}
	caKey := key()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "snapback test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	treetest.Must(t, err)
	ca, err := x509.ParseCertificate(caDER)
	treetest.Must(t, err)
	leaf := func(serial int64, usage x509.ExtKeyUsage) ([]byte, *ecdsa.PrivateKey) {
		k := key()
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "snapback test"},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		treetest.Must(t, err)
		return der, k
	}
	pemFile := func(name, typ string, der []byte) {
		treetest.Must(t, os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600))
	}
	clientDER, clientKey := leaf(2, x509.ExtKeyUsageClientAuth)
	keyDER, err := x509.MarshalECPrivateKey(clientKey)
	treetest.Must(t, err)
	pemFile("ca.pem", "CERTIFICATE", caDER)
	pemFile("cert.pem", "CERTIFICATE", clientDER)
	pemFile("key.pem", "EC PRIVATE KEY", keyDER)
	serverDER, serverKey := leaf(3, x509.ExtKeyUsageServerAuth)
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{serverDER}, PrivateKey: serverKey}},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool,
	}, dir
}
