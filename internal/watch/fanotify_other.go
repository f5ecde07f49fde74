//go:build !linux

package watch

// PidNS: no pid namespaces on this system.
func PidNS() uint64 { return 0 }

// Agent: who wrote is told on Linux only.
func Agent() (Proc, bool) { return Proc{}, false }
