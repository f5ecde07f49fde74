// Package overlay runs a command inside a copy-on-write view of the
// project: kernel overlayfs mounted at the root's own path in a private
// mount namespace, so the command sees the tree at its usual absolute
// path while every change lands in the run's upper layer (package layer,
// below this one, reads and writes the layer's format).
//
// The mount is made by a helper: snapback re-executes itself in a new
// mount and PID namespace with the hidden verb [HelperVerb]; the helper
// mounts, hides the store (the view's .snapback; a store outside the tree
// is covered in the init's namespace: [Spec.Store]), and stays as the
// namespace's init (PID 1): it
// mounts the namespace's own /proc, starts the command as its child in
// the working directory, forwards the signals snapback passes through a
// pipe ([Session.Signal]), reaps orphans and exits with the command's
// status (128+N for signal N). Once the command has exited, it waits up
// to [Spec.Grace] for the processes the command left behind, ends those
// still running (saying so on stderr) and exits only when none is left. The command sees no process outside the run, and no
// descriptor that leads around the view reaches it (closeReaching), so
// the real tree and the store are reachable only by going around the
// view on purpose. The fuse mode runs the same init ([StartInit]) under
// its own helper.
//
// The command stays in snapback's process group, the terminal's
// foreground: the terminal's ^C and ^Z reach it directly. The init and
// the fuse helper catch the signals snapback forwards, so that one sent
// to them directly (those from the terminal) is not delivered twice.
package overlay

import "time"

// HelperVerb is the hidden first argument that makes snapback the helper.
const HelperVerb = "__overlay-exec"

// Spec is what the helper needs to build the view.
type Spec struct {
	Root  string `json:"root"`  // the project root (lower layer and mount point)
	Upper string `json:"upper"` // the run's upper layer
	Work  string `json:"work"`  // overlayfs's work directory
	Dir   string `json:"dir"`   // the command's working directory
	Path  string `json:"path"`  // the command's resolved executable
	// UserNS: the helper runs in a user namespace of its own that maps only
	// the caller's uid and gid (an ordinary user: the command keeps its
	// identity and gets no capabilities).
	UserNS bool `json:"userns,omitempty"`
	// Signals is the descriptor, in the helper, of the pipe snapback
	// forwards signals through (one byte, the number, each).
	Signals int `json:"signals,omitempty"`
	// Lock is the descriptor, in the helper, of the run's lock file (0:
	// none). The init keeps it open until every process of the run is
	// gone: a run whose snapback died still shows as running, and is not
	// committed or discarded, while anything of it can write to its layer.
	Lock int `json:"lock,omitempty"`
	// Grace is how long the init waits, once the command has exited, for
	// the processes it left behind, before it ends them.
	Grace time.Duration `json:"grace,omitempty"`
	// Store is the project's store when it lives outside the tree (""
	// for .snapback, which the view itself hides): the init covers it
	// with an empty read-only directory, so that the command cannot
	// reach the history by its path either.
	Store string `json:"store,omitempty"`
	// Bind, when set, is the view itself (the zfs mode's clone of the
	// root, without the store): bind-mounted over Root instead of an
	// overlay of it; Upper and Work are unused then. Cover is a
	// directory the init covers as it covers Store (the clones' mount
	// points), so that the command reaches the clone only as the view.
	Bind  string `json:"bind,omitempty"`
	Cover string `json:"cover,omitempty"`
}
