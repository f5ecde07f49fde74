// Package layers states the order of snapback's packages, lowest first.
// A package imports only packages of a lower rank than its own; its test
// holds the module's import graph to that, so that a view helper never
// grows a store and a store never grows a command line. A new package
// takes its place in [Rank].
package layers

// Rank is each package's layer (import paths below the module's).
var Rank = map[string]int{
	// Leaves: names and mechanisms that know nothing of snapback's others.
	"internal/layout":  0,
	"internal/suggest": 0,
	"internal/gitdiff": 0,
	"fsutil":           0,
	// The man pages, as the binary holds them (made by a test of the
	// command's, which installs them).
	"man": 0,
	// The Docker Engine API client (docker-volume's; in place of the SDK,
	// whose package initialisation every process paid).
	"internal/dockerapi": 0,
	// What reads the tree's own formats, the table of isolation modes
	// (a tree mode's row holds fsutil's primitives), and the tree's
	// watcher.
	"internal/isolation": 1,
	"internal/gitdirs":   1,
	"internal/treetest":  1,
	"overlay/layer":      1,
	"internal/watch":     1,
	// FUSE over io_uring for go-fuse (a transport; no snapback in it).
	"overlay/fuse/uring": 1,
	// The config (it names the modes), and the store's data types:
	// entries, manifests, records and ids, and their codec (what the
	// catalog and the command read without opening a store).
	"config":          2,
	"snapshot/record": 2,
	// The views.
	"overlay":      3,
	"overlay/fuse": 4,
	"overlay/zfs":  4,
	// The store and the target backends: neither imports the other (the
	// store drives the backends through snapshot.Backend, which
	// cmd/snapback wires), so the store is built without their drivers.
	"snapshot": 5,
	"backends": 5,
	// What drives the store.
	"agent":     6,
	"catalog":   6,
	"mcpserver": 6,
	"runner":    6,
	// The command.
	"cmd/snapback": 7,
}
