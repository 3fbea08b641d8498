//go:build !linux

package main

// makeUndumpable does nothing where there is no /proc/PID/environ to
// protect (other systems keep another process's environment from a
// same-user reader in their own ways, or not at all).
func makeUndumpable() error { return nil }
