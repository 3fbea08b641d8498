//go:build !unix

package openai

func cpuSeconds() float64 { return 0 }
