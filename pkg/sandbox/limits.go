package sandbox

import (
	"bytes"
	"strconv"
	"sync"
	"time"
)

// prlimitArgs is the argv prefix that sets l's rlimits on the program
// (util-linux prlimit execs the program with them; rlimits survive exec
// and bind every process the program starts). RLIMIT_CPU gets a hard
// limit one second past the soft one so the program first gets SIGXCPU,
// which tells a CPU limit apart from a kill.
func prlimitArgs(prlimit string, l Limits) []string {
	cpu := int64((l.CPUTime + time.Second - 1) / time.Second)
	return []string{prlimit,
		"--cpu=" + strconv.FormatInt(cpu, 10) + ":" + strconv.FormatInt(cpu+1, 10),
		"--as=" + strconv.FormatInt(l.MemoryBytes, 10),
		"--nproc=" + strconv.Itoa(l.Processes),
		"--fsize=" + strconv.FormatInt(l.FileSizeBytes, 10),
		"--core=0",
		"--"}
}

// capWriter keeps the first limit bytes written and calls over once
// when more arrive.
type capWriter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	limit int64
	hit   bool
	over  func()
}

func (w *capWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if room := w.limit - int64(w.buf.Len()); int64(len(p)) > room {
		if room > 0 {
			w.buf.Write(p[:room])
		}
		if !w.hit {
			w.hit = true
			w.over()
		}
		return len(p), nil
	}
	w.buf.Write(p)
	return len(p), nil
}

func (w *capWriter) bytes() []byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	return bytes.Clone(w.buf.Bytes())
}

// Classify names the limit that ended a run the sandbox did not kill
// itself (backends call it; so does a harness that runs programs inside
// the sandbox and reports their exit status and stderr): SIGXCPU or a CPU time at the limit, SIGXFSZ, or the program's
// own report of an allocation, fork or write that its rlimit refused
// (Python raises MemoryError, BlockingIOError and OSError EFBIG; C++
// throws std::bad_alloc).
func Classify(res *Result, cpu time.Duration, l Limits) {
	// Signal numbers as Linux (and macOS) number them: sandboxed programs
	// run on Linux (bwrap, docker), and Windows' syscall has no SIGXCPU.
	const sigKILL, sigXCPU, sigXFSZ = 9, 24, 25
	if res.Limit != LimitNone || res.ExitCode == 0 {
		return
	}
	switch {
	case res.ExitCode == 128+sigXCPU,
		res.ExitCode == 128+sigKILL && cpu >= l.CPUTime.Truncate(time.Second):
		res.Limit = LimitCPUTime
	case res.ExitCode == 128+sigXFSZ, bytes.Contains(res.Stderr, []byte("File too large")):
		res.Limit = LimitFileSize
	case bytes.Contains(res.Stderr, []byte("MemoryError")), bytes.Contains(res.Stderr, []byte("std::bad_alloc")),
		bytes.Contains(res.Stderr, []byte("Cannot allocate memory")), bytes.Contains(res.Stderr, []byte("out of memory")):
		res.Limit = LimitMemory
	case bytes.Contains(res.Stderr, []byte("BlockingIOError")), bytes.Contains(res.Stderr, []byte("can't start new thread")),
		bytes.Contains(res.Stderr, []byte("fork: Resource temporarily unavailable")):
		res.Limit = LimitProcesses
	}
}
