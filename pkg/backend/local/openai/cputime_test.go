//go:build unix

package openai

import "syscall"

// cpuSeconds is the CPU time this process has used (user + system): on a
// shared machine, tokens per CPU-second compare runs that wall-clock
// rates cannot.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return float64(ru.Utime.Sec+ru.Stime.Sec) + float64(ru.Utime.Usec+ru.Stime.Usec)/1e6
}
