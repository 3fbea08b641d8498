package procgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A supervised program runs under a small supervisor: this same binary,
// re-executed (/proc/self/exe) with supervisorArg0 as its argv[0], which
// init below recognises before anything else runs. The supervisor
//
//   - is a child subreaper (PR_SET_CHILD_SUBREAPER), so every descendant
//     of the program that is orphaned — a `(sleep 120 &)` of a wrapper
//     shell, a daemon that called setsid() and left the process group —
//     becomes its child instead of init's, and it can find them all;
//   - starts the program (same process group, same descriptors, same
//     environment) and waits for it;
//   - when the program exits, kills every descendant left and only then
//     exits, with the program's status: so when Wait returns in rllm,
//     nothing of the program remains;
//   - when rllm dies — even by SIGKILL, which no handler sees — it reads
//     end-of-file on a pipe whose only writer is rllm (the kernel closes
//     it with the process), kills the whole tree and exits; the program
//     also gets SIGKILL if the supervisor itself dies (parent-death
//     signal);
//   - on SIGUSR1 (Kill) kills the whole tree and exits as killed.
//
// Why not a parent-death signal on the program alone: it is not passed
// to the program's children, so a wrapper's grandchildren survive. Why
// not killing the process group from rllm: rllm killed by SIGKILL runs no
// code, and a setsid() child is in no group of ours. Why not a PID
// namespace: it needs root or a user namespace, which changes the uid the
// program sees; the supervisor works for any user.
const supervisorArg0 = "rllm:procgroup-supervisor"

func init() {
	if len(os.Args) > 0 && os.Args[0] == supervisorArg0 {
		os.Exit(supervise(os.Args[1:]))
	}
}

// lifeline is a pipe whose write end only this process holds (it is
// close-on-exec, so no child inherits it): a supervisor reading its read
// end sees end-of-file exactly when this process has died.
var lifeline struct {
	once sync.Once
	r, w *os.File
	err  error
}

func lifelineReader() (*os.File, error) {
	lifeline.once.Do(func() {
		lifeline.r, lifeline.w, lifeline.err = os.Pipe()
	})
	return lifeline.r, lifeline.err
}

// Supervise makes cmd (configured by Command or Configure, not yet
// started) run under a supervisor, so that nothing the program starts
// outlives the program or rllm (see supervisorArg0). cmd's Path, Args,
// Dir, Env, standard descriptors and ExtraFiles keep their meaning; its
// Process is the supervisor's, Wait returns the program's exit status
// (a signal that killed it included) once every descendant is gone,
// and Kill kills the whole tree. A program that cannot be found or is
// not executable fails Start, as without the supervisor.
func Supervise(cmd *exec.Cmd) {
	if cmd.Err != nil || len(cmd.Args) == 0 || cmd.Args[0] == supervisorArg0 {
		return
	}
	if err := checkExecutable(cmd); err != nil {
		cmd.Err = err
		return
	}
	r, err := lifelineReader()
	if err != nil {
		cmd.Err = fmt.Errorf("procgroup: %w", err)
		return
	}
	fd := 3 + len(cmd.ExtraFiles)
	cmd.ExtraFiles = append(cmd.ExtraFiles, r)
	args := append([]string{supervisorArg0, strconv.Itoa(fd), cmd.Path}, cmd.Args...)
	// No parent-death signal on the supervisor: it is tied to the thread
	// that forked, which may end before rllm; the lifeline is not.
	cmd.Path, cmd.Args = "/proc/self/exe", args
}

// checkExecutable reports the error exec would give for a program that
// is missing or not executable, before the supervisor starts.
func checkExecutable(cmd *exec.Cmd) error {
	p := cmd.Path
	if !filepath.IsAbs(p) && cmd.Dir != "" {
		p = filepath.Join(cmd.Dir, p)
	}
	fi, err := os.Stat(p)
	switch {
	case err != nil:
		return &fs.PathError{Op: "fork/exec", Path: cmd.Path, Err: unwrapErrno(err)}
	case fi.IsDir():
		return &fs.PathError{Op: "fork/exec", Path: cmd.Path, Err: syscall.EACCES}
	}
	if unix.Access(p, unix.X_OK) != nil {
		return &fs.PathError{Op: "fork/exec", Path: cmd.Path, Err: syscall.EACCES}
	}
	return nil
}

func unwrapErrno(err error) error {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno
	}
	return err
}

// supervised reports whether cmd runs under a supervisor.
func supervised(cmd *exec.Cmd) bool {
	return len(cmd.Args) > 0 && cmd.Args[0] == supervisorArg0
}

// killSupervised asks a running supervisor to kill the tree; once it has
// exited (the program may have killed it), the process group is killed.
func killSupervised(cmd *exec.Cmd) error {
	if err := cmd.Process.Signal(syscall.SIGUSR1); errors.Is(err, os.ErrProcessDone) {
		if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); err != nil && err != syscall.ESRCH {
			return err
		}
	}
	return nil
}

// supervise is the supervisor's main: args are the lifeline's descriptor,
// the program's path and its argv.
func supervise(args []string) int {
	if len(args) < 3 {
		fmt.Fprintln(os.Stderr, "rllm supervisor: missing arguments")
		return 2
	}
	lifeFd, err := strconv.Atoi(args[0])
	if err != nil || lifeFd < 3 {
		fmt.Fprintln(os.Stderr, "rllm supervisor: bad lifeline descriptor")
		return 2
	}
	path, argv := args[1], args[2:]
	// The forking thread is the one the program's parent-death signal
	// watches: keep it for the supervisor's whole life.
	runtime.LockOSThread()
	sigs := make(chan os.Signal, 4)
	// Handled, not ignored: an ignored signal would stay ignored in the
	// program. SIGTERM, SIGINT and SIGHUP reach the program directly
	// (same process group); the supervisor waits for it to act on them.
	signal.Notify(sigs, syscall.SIGUSR1, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	// Refused only by a seccomp profile: the program still runs, and its
	// descendants that stay below it are still found and killed.
	_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	life := os.NewFile(uintptr(lifeFd), "lifeline")
	syscall.CloseOnExec(lifeFd)
	files := []*os.File{os.Stdin, os.Stdout, os.Stderr}
	for fd := 3; fd < lifeFd; fd++ {
		files = append(files, os.NewFile(uintptr(fd), "fd"+strconv.Itoa(fd)))
	}
	proc, err := os.StartProcess(path, argv, &os.ProcAttr{
		Env:   os.Environ(),
		Files: files,
		Sys:   &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL},
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "rllm: cannot start %s: %v\n", path, err)
		if errors.Is(err, fs.ErrNotExist) {
			return 127
		}
		return 126
	}
	progPid := proc.Pid
	// The program's descriptors are the program's: a pipe it closes
	// reads end-of-file at once, not when the supervisor exits.
	if null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0); err == nil {
		for fd := 0; fd < 3; fd++ {
			_ = unix.Dup2(int(null.Fd()), fd)
		}
		null.Close()
	}
	for _, f := range files[3:] {
		f.Close()
	}

	// Reaping: every child, the program and orphans alike.
	type exit struct {
		pid int
		ws  syscall.WaitStatus
	}
	exits := make(chan exit, 16)
	noChildren := make(chan struct{})
	go func() {
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, 0, nil)
			if err == syscall.EINTR {
				continue
			}
			if err != nil {
				close(noChildren)
				return
			}
			if pid == progPid {
				exits <- exit{pid, ws}
			}
		}
	}()
	rllmGone := make(chan struct{})
	go func() {
		var b [1]byte
		for {
			if _, err := life.Read(b[:]); err != nil {
				close(rllmGone)
				return
			}
		}
	}()

	var status *syscall.WaitStatus
	for status == nil {
		select {
		case e := <-exits:
			status = &e.ws
		case <-rllmGone:
			killTree(noChildren)
			return 128 + int(syscall.SIGKILL)
		case s := <-sigs:
			if s == syscall.SIGUSR1 {
				killTree(noChildren)
				raise(syscall.SIGKILL)
			}
		}
	}
	killTree(noChildren)
	if status.Signaled() {
		raise(status.Signal())
	}
	return status.ExitStatus()
}

// killTree kills every descendant until none is left (noChildren
// closes when wait4 finds no child). A process that forks while being
// killed leaves an orphan, which comes back to the supervisor and is
// found by the next scan.
func killTree(noChildren <-chan struct{}) {
	select {
	case <-noChildren: // the usual case: the program left nothing
		return
	case <-time.After(time.Millisecond):
	}
	self := os.Getpid()
	for delay := time.Millisecond; ; delay = min(2*delay, 50*time.Millisecond) {
		for _, pid := range descendants(self) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		select {
		case <-noChildren:
			return
		case <-time.After(delay):
		}
	}
}

// descendants lists the processes below pid, read from /proc.
func descendants(pid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parens.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 2 {
			continue
		}
		if ppid, err := strconv.Atoi(f[1]); err == nil {
			children[ppid] = append(children[ppid], p)
		}
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		c := children[queue[0]]
		queue = queue[1:]
		out = append(out, c...)
		queue = append(queue, c...)
	}
	return out
}

// raise ends the supervisor by sig, as the program ended, so that rllm
// sees "signal: killed" and the like. The Go runtime would turn most
// signals into a crash report on the program's stderr, so the signal is
// delivered to a shell exec'd in the supervisor's place (exec restores
// default dispositions; no core file is written).
func raise(sig syscall.Signal) {
	if sig == syscall.SIGKILL {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	}
	_ = syscall.Setrlimit(syscall.RLIMIT_CORE, &syscall.Rlimit{})
	_ = syscall.Exec("/bin/sh", []string{"sh", "-c", "kill -" + strconv.Itoa(int(sig)) + " $$"}, nil)
	os.Exit(128 + int(sig))
}
