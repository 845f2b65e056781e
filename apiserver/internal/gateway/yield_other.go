//go:build !linux

package gateway

// yieldCPU does nothing outside Linux (see yield_linux.go).
func yieldCPU() {}
