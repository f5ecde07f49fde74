// Package overlay runs a command inside a copy-on-write view of the
// project: kernel overlayfs mounted at the root's own path in a private
// mount namespace, so the command sees the tree at its usual absolute
// path while every change lands in the run's upper layer (see
// snapshot.Repo.Changeset for the layer's format).
//
// The mount is made by a helper: snapback re-executes itself in a new
// mount namespace with the hidden verb [HelperVerb]; the helper mounts,
// hides the store, enters the working directory and execs the command, so
// the command is the helper process itself and its exit status, signals
// and terminal are exactly its own. The serving process never enters the
// view (the FUSE mode's deadlock hazard does not arise here).
package overlay

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
}
