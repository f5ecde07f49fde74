// Package layers states the order of snapback's packages, lowest first.
// A package imports only packages of a lower rank than its own; its test
// holds the module's import graph to that, so that a view helper never
// grows a store and a store never grows a command line. A new package
// takes its place in [Rank].
package layers

// Rank is each package's layer (import paths below the module's).
var Rank = map[string]int{
	// Leaves: names and mechanisms that know nothing of snapback's others.
	"internal/layout":    0,
	"internal/isolation": 0,
	"internal/suggest":   0,
	"internal/gitdiff":   0,
	"fsutil":             0,
	// What reads the tree's and the config's own formats.
	"internal/gitdirs":  1,
	"internal/treetest": 1,
	"config":            1,
	"overlay/layer":     1,
	// The mechanisms: the views and the target backends.
	"overlay":      2,
	"backends":     2,
	"overlay/fuse": 3,
	// The store.
	"snapshot": 4,
	// What drives the store.
	"agent":     5,
	"catalog":   5,
	"mcpserver": 5,
	"runner":    5,
	// The command.
	"cmd/snapback": 6,
}
