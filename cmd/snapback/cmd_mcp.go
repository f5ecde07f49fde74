package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/snapback/snapback/mcpserver"
	"github.com/spf13/cobra"
)

type mcpOptions struct{ readOnly bool }

func newMCPCmd(g *globals) *cobra.Command {
	var o mcpOptions
	c := &cobra.Command{
		Use:   "mcp [--read-only]",
		Short: "Serve snapback's verbs to a coding agent as MCP tools, over stdio",
		Long: `Serve snapback's verbs as tools of the Model Context Protocol, over stdin
and stdout, for a coding agent's harness to start: status, list and diff
read; checkpoint (begin, end, status), undo, redo, commit and discard change
things (--read-only leaves them out). Each tool takes a directory (default: the
directory the server runs in, or -C DIR), which must be in the project
the server was started in or in a root the client declares, and the
verb's ids, paths and flags; its result is the verb's --json object, and
a failure is a tool error carrying the verb's one-line message. The
server ends when stdin closes (exit 0), or on SIGINT or SIGTERM (exit 130 or
143, as every verb).`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error { return runMCP(g, o) },
	}
	c.Flags().BoolVar(&o.readOnly, "read-only", false, "serve only the tools that never change anything (status, list, diff)")
	return c
}

func runMCP(g *globals, o mcpOptions) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("mcp: the snapback binary: %w", err)
	}
	dir, err := os.Getwd() // -C DIR is applied already
	if err != nil {
		return fmt.Errorf("mcp: working directory: %w", err)
	}
	root, err := g.rootDir() // the project served: calls act there only
	if err != nil {
		return fmt.Errorf("mcp: %w", err)
	}
	s := mcpserver.New(mcpserver.Options{Exe: exe, Dir: dir, Root: root, ReadOnly: o.readOnly, Version: version})
	ctx := g.ctx // cancelled by SIGINT or SIGTERM (interrupt.go)
	// A bad line is answered with a JSON-RPC error, never the end of the
	// server (see mcpserver.Transport).
	err = s.Run(ctx, mcpserver.Transport(os.Stdin, g.stdout))
	if ctx.Err() != nil {
		return fmt.Errorf("mcp: %w", ctx.Err()) // told to stop: interrupted
	}
	if errors.Is(err, io.EOF) {
		return nil // the client closed stdin: done
	}
	if err != nil {
		return fmt.Errorf("mcp: %w", err)
	}
	return nil
}
