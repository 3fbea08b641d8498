//go:build unix

package hub

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// selfCPU is this process's user and system CPU time.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procCPU is another process's user and system CPU time, from
// /proc/PID/stat (Linux; 0 elsewhere). Fields 14 and 15 (utime, stime)
// are in clock ticks, 100 a second on Linux (USER_HZ).
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	s := string(b)
	// The command name (field 2) is in parentheses and may hold spaces.
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0
	}
	return time.Duration(u+st) * 10 * time.Millisecond
}
