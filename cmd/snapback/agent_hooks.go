package main

import (
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/snapback/snapback/agent"
)

// agentHooks lists the settings files of the project at root (and the
// user's, for a harness install --user writes) that hold snapback's
// hooks, each with when one of them last acted on the project, from the
// stamps in the store at storeDir ("" when there is none yet). A
// settings file or stamp that cannot be read is passed over: install and
// the hook say what is wrong with it.
func agentHooks(root, storeDir string) []agentHooksJSON {
	var out []agentHooksJSON
	for _, h := range agent.Harnesses {
		type place struct {
			dir, rel, file string
			toml           bool // a TOML config's [hooks] (agent.Harness.ConfigHooks)
		}
		var places []place
		for _, rel := range []string{h.Settings, h.LocalSettings} {
			if rel != "" {
				places = append(places, place{root, rel, rel, false})
			}
		}
		if h.Config != "" {
			places = append(places, place{root, h.Config, h.Config, true})
		}
		if dir, err := h.UserDir(); err == nil {
			places = append(places, place{dir, h.UserSettings, filepath.Join(dir, h.UserSettings), false})
			if h.UserConfig != "" {
				places = append(places, place{dir, h.UserConfig, filepath.Join(dir, h.UserConfig), true})
			}
		}
		var last time.Time
		if storeDir != "" {
			last, _ = agent.LastFired(storeDir, h.Name)
		}
		for _, p := range places {
			if p.toml {
				if ok, err := h.ConfigHooks(p.dir, p.rel); err != nil || !ok {
					continue
				}
			} else if c, err := h.UninstallHooks(p.dir, p.rel, false); err != nil || !c.Changed() {
				continue
			}
			e := agentHooksJSON{Harness: h.Name, File: p.file, NeverFired: last.IsZero()}
			if e.NeverFired {
				e.NextStep = h.NextStep
			} else {
				e.LastFired = &last
			}
			out = append(out, e)
		}
	}
	return out
}

// agentHookTitle is the harness's name as its makers write it.
func agentHookTitle(name string) string {
	if h, err := agent.Find(name); err == nil {
		return h.Title
	}
	return name
}

// neverFired is the warning for hooks installed but never fired.
func neverFired(e agentHooksJSON) string {
	return fmt.Sprintf("%s hooks installed in %s but never fired in this project: %s", agentHookTitle(e.Harness), e.File, e.NextStep)
}

// printAgentHooks writes doctor's line for each entry of hooks.
func printAgentHooks(w io.Writer, hooks []agentHooksJSON) {
	for _, e := range hooks {
		if e.NeverFired {
			fmt.Fprintf(w, "warning: %s\n", neverFired(e))
		} else {
			fmt.Fprintf(w, "%s hooks installed in %s, last fired %s\n", agentHookTitle(e.Harness), e.File, e.LastFired.Local().Format("2006-01-02 15:04:05"))
		}
	}
}
