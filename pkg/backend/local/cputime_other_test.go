//go:build !unix

package local

func cpuSeconds() float64 { return 0 }
