// Package dockerapi is the small Docker Engine API client the
// docker-volume backend uses: HTTP/1.1 over net/http and encoding/json,
// with types holding only the fields snapback reads or sends. It exists
// instead of the Docker SDK (github.com/docker/docker/client) for start-up
// cost: every snapback process, so every hook of a coding agent's turn,
// pays the package initialisation of everything linked, and the SDK's
// tree (image references' regular expressions, digests, OpenTelemetry)
// took about 1 ms of a 5 ms start, and a quarter of its page faults.
// net/http is linked anyway.
//
// It connects as the SDK's FromEnv and WithAPIVersionNegotiation do:
// DOCKER_HOST (unix:// or tcp://; unix:///var/run/docker.sock when
// unset), DOCKER_CERT_PATH (ca.pem, cert.pem, key.pem: TLS) with
// DOCKER_TLS_VERIFY (verify the daemon's certificate), DOCKER_API_VERSION
// (a version pinned, not negotiated); else the version is the lower of
// the daemon's (its /_ping's Api-Version) and [MaxVersion].
package dockerapi

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

const (
	// MaxVersion is the newest API version spoken: the SDK this package
	// replaced (v28.5) negotiated up to it, and the calls and fields used
	// here mean the same from MinVersion to it. Docker Engine 29 refuses
	// versions before 1.44 by default, so the maximum must not be older.
	MaxVersion = "1.51"
	// MinVersion is the oldest: a wait for the next exit (the condition
	// parameter, which lets the caller register the wait before it starts
	// the container) came in 1.30 (Docker 17.06).
	MinVersion = "1.30"
	// DefaultHost is the daemon's socket when DOCKER_HOST is not set.
	DefaultHost = "unix:///var/run/docker.sock"
)

// Client talks to one daemon; it is safe for concurrent use.
type Client struct {
	host     string // as given: DaemonHost
	proto    string // unix or tcp
	addr     string // the socket's path, or host:port
	basePath string // a tcp:// host's path, if any
	scheme   string // http or https
	tls      *tls.Config
	tr       *http.Transport
	http     *http.Client

	mu      sync.Mutex
	version string // negotiated, or pinned by DOCKER_API_VERSION; empty until then
}

// FromEnv makes a client from the environment, as the SDK's
// client.FromEnv with WithAPIVersionNegotiation: nothing is dialled yet.
func FromEnv() (*Client, error) {
	host := os.Getenv("DOCKER_HOST")
	if host == "" {
		host = DefaultHost
	}
	c := &Client{host: host, scheme: "http"}
	proto, addr, ok := strings.Cut(host, "://")
	if !ok || addr == "" {
		return nil, fmt.Errorf("DOCKER_HOST %q is not a daemon address (unix:///path or tcp://host:port)", host)
	}
	switch proto {
	case "unix":
		c.proto, c.addr = "unix", addr
	case "tcp":
		u, err := url.Parse("tcp://" + addr)
		if err != nil {
			return nil, fmt.Errorf("DOCKER_HOST %q: %w", host, err)
		}
		c.proto, c.addr, c.basePath = "tcp", u.Host, strings.TrimSuffix(u.Path, "/")
	default:
		return nil, fmt.Errorf("DOCKER_HOST %q: only unix:// and tcp:// daemons are supported", host)
	}
	if v := strings.TrimPrefix(os.Getenv("DOCKER_API_VERSION"), "v"); v != "" {
		if _, ok := parseVersion(v); !ok {
			return nil, fmt.Errorf("DOCKER_API_VERSION %q is not a version like %s", v, MaxVersion)
		}
		if versionLess(v, MinVersion) {
			return nil, fmt.Errorf("DOCKER_API_VERSION %s is older than %s, the oldest this client speaks", v, MinVersion)
		}
		c.version = v
	}
	if dir := os.Getenv("DOCKER_CERT_PATH"); dir != "" {
		cfg, err := tlsConfig(dir, os.Getenv("DOCKER_TLS_VERIFY") != "")
		if err != nil {
			return nil, err
		}
		c.tls, c.scheme = cfg, "https"
	}
	c.tr = &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return c.dial(ctx)
		},
		TLSClientConfig: c.tls,
		// As the SDK: a long-lived process does not keep many idle
		// connections open.
		MaxIdleConns:    6,
		IdleConnTimeout: 30 * time.Second,
	}
	c.http = &http.Client{
		Transport: c.tr,
		// The daemon redirects nothing snapback asks for: a redirect is
		// not followed (nor was it by the SDK).
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return c, nil
}

// tlsConfig is the SDK's client TLS from DOCKER_CERT_PATH: the daemon's
// certificate checked against ca.pem alone when verify, and this
// client's certificate from cert.pem and key.pem.
func tlsConfig(dir string, verify bool) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: !verify} // not verifying is DOCKER_TLS_VERIFY's choice, as the SDK's
	if verify {
		pem, err := os.ReadFile(filepath.Join(dir, "ca.pem"))
		if err != nil {
			return nil, fmt.Errorf("DOCKER_CERT_PATH: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("DOCKER_CERT_PATH: %s holds no PEM certificate", filepath.Join(dir, "ca.pem"))
		}
		cfg.RootCAs = pool
	}
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem"))
	if err != nil {
		return nil, fmt.Errorf("DOCKER_CERT_PATH: client certificate: %w", err)
	}
	cfg.Certificates = []tls.Certificate{cert}
	return cfg, nil
}

// DaemonHost is the daemon's address as DOCKER_HOST gave it (or the
// default), such as unix:///var/run/docker.sock.
func (c *Client) DaemonHost() string { return c.host }

// Close closes the idle connections; a hijacked one is its caller's.
func (c *Client) Close() error {
	c.tr.CloseIdleConnections()
	return nil
}

// dial opens a plain connection to the daemon (TLS is the transport's,
// or the hijacker's, to add).
func (c *Client) dial(ctx context.Context) (net.Conn, error) {
	var d net.Dialer
	if c.proto == "tcp" {
		d.KeepAlive = 30 * time.Second
	}
	return d.DialContext(ctx, c.proto, c.addr)
}

// Error is the daemon's answer to a request that failed: its status and
// the message of its JSON body.
type Error struct {
	StatusCode int
	Message    string
}

func (e *Error) Error() string {
	return fmt.Sprintf("Docker daemon answered %d: %s", e.StatusCode, e.Message)
}

// IsNotFound reports whether err is the daemon's 404: no such volume,
// container or image.
func IsNotFound(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.StatusCode == http.StatusNotFound
}

// responseError reads a failed response's message: the JSON body's
// "message", else the body's text, else the status's name, as one line.
func responseError(resp *http.Response) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10)) // what could be read is the message
	var msg struct {
		Message string `json:"message"`
	}
	text := ""
	if json.Unmarshal(body, &msg) == nil && msg.Message != "" {
		text = msg.Message
	} else {
		text = strings.TrimSpace(string(body))
	}
	if text == "" {
		text = http.StatusText(resp.StatusCode)
	}
	return &Error{StatusCode: resp.StatusCode, Message: strings.Join(strings.Fields(text), " ")}
}

// Version returns the API version requests use, negotiating it with the
// daemon on the first call (unless DOCKER_API_VERSION pinned one).
func (c *Client) Version(ctx context.Context) (string, error) {
	c.mu.Lock()
	v := c.version
	c.mu.Unlock()
	if v != "" {
		return v, nil
	}
	if err := c.Ping(ctx); err != nil {
		return "", err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.version, nil
}

// Ping checks that the daemon answers (GET /_ping, unversioned), and
// negotiates the API version from its Api-Version header when none is
// chosen yet: the lower of the daemon's and MaxVersion, refused below
// MinVersion.
func (c *Client) Ping(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url("/_ping", nil), nil)
	if err != nil {
		return fmt.Errorf("ping: %w", err)
	}
	resp, err := c.do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close() // read below
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET /_ping: %w", responseError(resp))
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096)) // "OK": read so the connection is reused
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.version != "" {
		return nil
	}
	v := resp.Header.Get("Api-Version")
	if v == "" {
		// A daemon before negotiation existed (1.24) does not say.
		return fmt.Errorf("the Docker daemon at %s gives no API version: it is older than API %s, the oldest this client speaks", c.host, MinVersion)
	}
	if _, ok := parseVersion(v); !ok {
		return fmt.Errorf("the Docker daemon at %s gives API version %q", c.host, v)
	}
	if versionLess(v, MinVersion) {
		return fmt.Errorf("the Docker daemon at %s speaks API %s, older than %s, the oldest this client speaks", c.host, v, MinVersion)
	}
	if versionLess(MaxVersion, v) {
		v = MaxVersion
	}
	c.version = v
	return nil
}

// parseVersion splits "1.41" into its numbers.
func parseVersion(v string) ([2]int, bool) {
	maj, min, ok := strings.Cut(v, ".")
	a, err1 := strconv.Atoi(maj)
	b, err2 := strconv.Atoi(min)
	return [2]int{a, b}, ok && err1 == nil && err2 == nil
}

// versionLess reports a < b for well-formed versions.
func versionLess(a, b string) bool {
	x, _ := parseVersion(a)
	y, _ := parseVersion(b)
	return x[0] < y[0] || x[0] == y[0] && x[1] < y[1]
}

// url is a request's address: on a unix socket the host name is only a
// placeholder.
//
// As the SDK's, names and ids go into the path as they are (the URL
// escapes what it must): Docker's own names hold no slash.
func (c *Client) url(p string, q url.Values) string {
	host := c.addr
	if c.proto == "unix" {
		host = "docker"
	}
	u := url.URL{Scheme: c.scheme, Host: host, Path: c.basePath + p, RawQuery: q.Encode()}
	return u.String()
}

// do sends req; a failure to reach the daemon names the request, not the
// placeholder URL net/http would.
func (c *Client) do(req *http.Request) (*http.Response, error) {
	resp, err := c.http.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		if cerr := req.Context().Err(); cerr != nil && !errors.Is(err, cerr) {
			err = fmt.Errorf("%w (%w)", cerr, err)
		}
		return nil, fmt.Errorf("%s %s: %w", req.Method, strings.TrimPrefix(req.URL.Path, c.basePath), err)
	}
	return resp, nil
}

// request sends a versioned request, body being JSON (a value) or raw (an
// io.Reader, with contentType), and returns the response of a success
// (a status below 400, as the SDK: 304 is "already so") or the daemon's
// Error.
func (c *Client) request(ctx context.Context, method, p string, q url.Values, body any, contentType string) (*http.Response, error) {
	v, err := c.Version(ctx)
	if err != nil {
		return nil, err
	}
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case io.Reader:
		r = b
	default:
		js, err := json.Marshal(b)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", method, p, err)
		}
		r, contentType = bytes.NewReader(js), "application/json"
	}
	req, err := http.NewRequestWithContext(ctx, method, c.url("/v"+v+p, q), r)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, p, err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := c.do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= 400 {
		defer resp.Body.Close() // read by responseError
		return nil, fmt.Errorf("%s %s: %w", method, p, responseError(resp))
	}
	return resp, nil
}

// call sends a request and decodes its JSON answer into out (unless nil),
// reading the body to its end.
func (c *Client) call(ctx context.Context, method, p string, q url.Values, body, out any) error {
	resp, err := c.request(ctx, method, p, q, body, "")
	if err != nil {
		return err
	}
	defer resp.Body.Close() // read to the end below
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			return fmt.Errorf("%s %s: decode the answer: %w", method, p, err)
		}
	}
	_, _ = io.Copy(io.Discard, resp.Body) // so that the connection is reused
	return nil
}

// Info is the part of GET /info snapback reads.
type Info struct {
	// Name is the daemon's host name.
	Name string `json:"Name"`
}

// Info returns the daemon's system information.
func (c *Client) Info(ctx context.Context) (Info, error) {
	var i Info
	err := c.call(ctx, http.MethodGet, "/info", nil, nil, &i)
	return i, err
}

// Volume is a named volume.
type Volume struct {
	Name       string            `json:"Name"`
	Driver     string            `json:"Driver"`
	Mountpoint string            `json:"Mountpoint"`
	Labels     map[string]string `json:"Labels"`
	Options    map[string]string `json:"Options"`
}

// VolumeInspect returns the volume; a missing one is an error that
// IsNotFound reports.
func (c *Client) VolumeInspect(ctx context.Context, name string) (Volume, error) {
	var v Volume
	if name == "" || name == "." || name == ".." || strings.Contains(name, "/") {
		// It goes into the request's path: ".." or a slash would ask
		// another endpoint (snapback.toml may come with a cloned repository).
		return v, fmt.Errorf("volume %q: not a Docker volume name", name)
	}
	err := c.call(ctx, http.MethodGet, "/volumes/"+name, nil, nil, &v)
	return v, err
}

// VolumeCreateOptions are a new volume's settings.
type VolumeCreateOptions struct {
	Name       string            `json:"Name"`
	Driver     string            `json:"Driver,omitempty"`
	DriverOpts map[string]string `json:"DriverOpts,omitempty"`
	Labels     map[string]string `json:"Labels,omitempty"`
}

// VolumeCreate creates a volume (or returns the one of that name).
func (c *Client) VolumeCreate(ctx context.Context, o VolumeCreateOptions) (Volume, error) {
	var v Volume
	err := c.call(ctx, http.MethodPost, "/volumes/create", nil, o, &v)
	return v, err
}

// Filters select containers: each key's values, as the API's JSON
// object of objects ({"label": {"a=b": true}}).
type Filters map[string][]string

func (f Filters) encode() string {
	m := make(map[string]map[string]bool, len(f))
	for k, vs := range f {
		m[k] = make(map[string]bool, len(vs))
		for _, v := range vs {
			m[k][v] = true
		}
	}
	js, _ := json.Marshal(m) // maps of strings always marshal
	return string(js)
}

// Container is a container as listed.
type Container struct {
	ID     string            `json:"Id"`
	Labels map[string]string `json:"Labels"`
}

// ContainerList lists the running containers (all of them when all)
// that match every filter.
func (c *Client) ContainerList(ctx context.Context, all bool, f Filters) ([]Container, error) {
	q := url.Values{}
	if all {
		q.Set("all", "1")
	}
	if len(f) > 0 {
		q.Set("filters", f.encode())
	}
	var cs []Container
	err := c.call(ctx, http.MethodGet, "/containers/json", q, nil, &cs)
	return cs, err
}

// ContainerJSON is the part of a container's inspection snapback reads.
type ContainerJSON struct {
	ID    string `json:"Id"`
	Name  string `json:"Name"`
	State *struct {
		Running   bool   `json:"Running"`
		StartedAt string `json:"StartedAt"`
	} `json:"State"`
}

// ContainerInspect returns the container's details.
func (c *Client) ContainerInspect(ctx context.Context, id string) (ContainerJSON, error) {
	var j ContainerJSON
	err := c.call(ctx, http.MethodGet, "/containers/"+id+"/json", nil, nil, &j)
	return j, err
}

// Config is a new container's configuration (the fields snapback sets).
type Config struct {
	Image           string            `json:"Image"`
	Cmd             []string          `json:"Cmd,omitempty"`
	Labels          map[string]string `json:"Labels,omitempty"`
	AttachStdin     bool              `json:"AttachStdin"`
	AttachStdout    bool              `json:"AttachStdout"`
	AttachStderr    bool              `json:"AttachStderr"`
	OpenStdin       bool              `json:"OpenStdin"`
	StdinOnce       bool              `json:"StdinOnce"`
	NetworkDisabled bool              `json:"NetworkDisabled,omitempty"`
}

// HostConfig is a new container's host side.
type HostConfig struct {
	NetworkMode string     `json:"NetworkMode,omitempty"`
	LogConfig   *LogConfig `json:"LogConfig,omitempty"`
	Mounts      []Mount    `json:"Mounts,omitempty"`
}

// LogConfig chooses the container's log driver ("none": no log).
type LogConfig struct {
	Type string `json:"Type"`
}

// Mount types.
const (
	MountVolume = "volume"
	MountBind   = "bind"
)

// Mount is a volume or a bind mount of a new container.
type Mount struct {
	Type          string         `json:"Type"`
	Source        string         `json:"Source,omitempty"`
	Target        string         `json:"Target"`
	ReadOnly      bool           `json:"ReadOnly,omitempty"`
	VolumeOptions *VolumeOptions `json:"VolumeOptions,omitempty"`
}

// VolumeOptions are a volume mount's: NoCopy keeps the image's files at
// the target out of a new volume.
type VolumeOptions struct {
	NoCopy bool `json:"NoCopy,omitempty"`
}

// ContainerCreate creates a container and returns its id.
func (c *Client) ContainerCreate(ctx context.Context, cfg *Config, hc *HostConfig) (string, error) {
	body := struct {
		*Config
		HostConfig *HostConfig `json:"HostConfig,omitempty"`
	}{cfg, hc}
	var out struct {
		ID string `json:"Id"`
	}
	if err := c.call(ctx, http.MethodPost, "/containers/create", nil, body, &out); err != nil {
		return "", err
	}
	if out.ID == "" {
		return "", errors.New("POST /containers/create: the daemon gave no container id")
	}
	return out.ID, nil
}

// ContainerStart starts a container (one already running is no error).
func (c *Client) ContainerStart(ctx context.Context, id string) error {
	return c.call(ctx, http.MethodPost, "/containers/"+id+"/start", nil, nil, nil)
}

// ContainerStop stops a container within the daemon's default time, its
// stop signal then SIGKILL (one already stopped is no error).
func (c *Client) ContainerStop(ctx context.Context, id string) error {
	return c.call(ctx, http.MethodPost, "/containers/"+id+"/stop", nil, nil, nil)
}

// ContainerRemove removes a container, killing it first when force.
func (c *Client) ContainerRemove(ctx context.Context, id string, force bool) error {
	q := url.Values{}
	if force {
		q.Set("force", "1")
	}
	return c.call(ctx, http.MethodDelete, "/containers/"+id, q, nil, nil)
}

// WaitResponse is how a container exited.
type WaitResponse struct {
	StatusCode int64 `json:"StatusCode"`
	Error      *struct {
		Message string `json:"Message"`
	} `json:"Error"`
}

// Wait conditions.
const (
	WaitNextExit   = "next-exit"
	WaitNotRunning = "not-running"
)

// ContainerWait waits for the container to meet condition. As the SDK's,
// it returns once the daemon has registered the wait (the daemon sends
// the answer's header at once, its body at the exit), so a container
// started after it returns is waited for; the result or the error comes
// on a channel. Cancelling ctx ends the wait with an error.
func (c *Client) ContainerWait(ctx context.Context, id, condition string) (<-chan WaitResponse, <-chan error) {
	resC := make(chan WaitResponse, 1)
	errC := make(chan error, 1)
	q := url.Values{}
	if condition != "" {
		q.Set("condition", condition)
	}
	p := "/containers/" + id + "/wait"
	resp, err := c.request(ctx, http.MethodPost, p, q, nil, "")
	if err != nil {
		errC <- err
		return resC, errC
	}
	go func() {
		defer resp.Body.Close() // read to the answer's end
		var res WaitResponse
		if err := json.NewDecoder(resp.Body).Decode(&res); err != nil {
			if cerr := ctx.Err(); cerr != nil {
				err = cerr
			}
			errC <- fmt.Errorf("POST %s: %w", p, err)
			return
		}
		resC <- res
	}()
	return resC, errC
}

// ImageInspect checks that the image exists (its details are not used); a
// missing one is an error that IsNotFound reports.
func (c *Client) ImageInspect(ctx context.Context, ref string) error {
	return c.call(ctx, http.MethodGet, "/images/"+ref+"/json", nil, nil, nil)
}

// ImageImport makes the image ref (name:tag) from the tar read from src,
// with the Dockerfile instructions changes applied, and reads the
// daemon's progress to its end: an error reported in it is returned.
func (c *Client) ImageImport(ctx context.Context, src io.Reader, ref string, changes []string) error {
	q := url.Values{}
	q.Set("fromSrc", "-")
	q.Set("repo", ref)
	for _, ch := range changes {
		q.Add("changes", ch)
	}
	resp, err := c.request(ctx, http.MethodPost, "/images/create", q, src, "application/x-tar")
	if err != nil {
		return err
	}
	defer resp.Body.Close() // read to the end by readProgress
	if err := readProgress(resp.Body); err != nil {
		return fmt.Errorf("POST /images/create: %w", err)
	}
	return nil
}

// readProgress reads a stream of JSON progress messages to its end,
// returning the first error one reports.
func readProgress(r io.Reader) error {
	dec := json.NewDecoder(r)
	for {
		var m struct {
			Error       string `json:"error"`
			ErrorDetail *struct {
				Message string `json:"message"`
			} `json:"errorDetail"`
		}
		if err := dec.Decode(&m); err == io.EOF {
			return nil
		} else if err != nil {
			return fmt.Errorf("read the progress: %w", err)
		}
		if m.ErrorDetail != nil && m.ErrorDetail.Message != "" {
			m.Error = m.ErrorDetail.Message
		}
		if m.Error != "" {
			return errors.New(strings.Join(strings.Fields(m.Error), " "))
		}
	}
}

// Hijacked is an attached container's connection: reads give its
// multiplexed output (see [StdCopy]), writes go to its standard input,
// and CloseWrite ends that input.
type Hijacked struct {
	conn net.Conn
	r    *bufio.Reader
	ctx  context.Context
	stop func() bool
}

// Read reads the container's output stream; once the context is
// cancelled (which closes the connection) it returns the context's
// error.
func (h *Hijacked) Read(p []byte) (int, error) {
	n, err := h.r.Read(p)
	if err != nil && err != io.EOF && h.ctx.Err() != nil {
		err = h.ctx.Err()
	}
	return n, err
}

// Write writes to the container's standard input.
func (h *Hijacked) Write(p []byte) (int, error) {
	n, err := h.conn.Write(p)
	if err != nil && h.ctx.Err() != nil {
		err = h.ctx.Err()
	}
	return n, err
}

// CloseWrite ends the container's standard input, keeping its output
// open.
func (h *Hijacked) CloseWrite() error {
	if cw, ok := h.conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.New("the connection to the daemon cannot be half-closed")
}

// SyscallConn is the plain socket's (a TLS connection has none), so that
// copying a file into the container's standard input (io.Copy from an
// *os.File) is a sendfile, as it was on the SDK's connection.
func (h *Hijacked) SyscallConn() (syscall.RawConn, error) {
	if sc, ok := h.conn.(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return nil, errors.New("the connection to the daemon is not a plain socket")
}

// Close closes the connection.
func (h *Hijacked) Close() error {
	h.stop()
	return h.conn.Close()
}

// AttachOptions say which of the container's streams to attach.
type AttachOptions struct {
	Stdin, Stdout, Stderr bool
}

// ContainerAttach attaches to the container's streams (before it starts,
// so that nothing of its output is missed) on a connection taken over
// from HTTP (Upgrade: tcp). Cancelling ctx closes the connection.
func (c *Client) ContainerAttach(ctx context.Context, id string, o AttachOptions) (*Hijacked, error) {
	v, err := c.Version(ctx)
	if err != nil {
		return nil, err
	}
	q := url.Values{}
	q.Set("stream", "1")
	for name, on := range map[string]bool{"stdin": o.Stdin, "stdout": o.Stdout, "stderr": o.Stderr} {
		if on {
			q.Set(name, "1")
		}
	}
	p := "/containers/" + id + "/attach"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url("/v"+v+p, q), nil)
	if err != nil {
		return nil, fmt.Errorf("POST %s: %w", p, err)
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "tcp")
	conn, err := c.dial(ctx)
	if err != nil {
		return nil, fmt.Errorf("POST %s: %w", p, err)
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() }) // aborts the request, then the stream
	fail := func(err error) (*Hijacked, error) {
		stop()
		conn.Close()
		if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
			err = fmt.Errorf("%w (%w)", cerr, err)
		}
		return nil, fmt.Errorf("POST %s: %w", p, err)
	}
	if c.tls != nil {
		cfg := c.tls.Clone()
		if cfg.ServerName == "" {
			cfg.ServerName, _, _ = net.SplitHostPort(c.addr)
		}
		tc := tls.Client(conn, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			return fail(err)
		}
		conn = tc
	}
	if err := req.Write(conn); err != nil {
		return fail(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		return fail(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols && resp.StatusCode != http.StatusOK {
		err := responseError(resp)
		resp.Body.Close() // read by responseError
		return fail(err)
	}
	return &Hijacked{conn: conn, r: br, ctx: ctx, stop: stop}, nil
}
