package main

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"
)

func newVersionCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if g.json {
				// "version" is the JSON schema's, as in every output.
				return g.printJSON(struct {
					Version  int    `json:"version"`
					Snapback string `json:"snapback"`
					Revision string `json:"revision,omitempty"`
					Modified bool   `json:"modified,omitempty"`
					Go       string `json:"go"`
					OS       string `json:"os"`
					Arch     string `json:"arch"`
				}{jsonVersion, version, revision, modified, runtime.Version(), runtime.GOOS, runtime.GOARCH})
			}
			fmt.Fprintf(g.stdout, "snapback %s (%s %s/%s)\n", version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return nil
		},
	}
}
