package sandbox

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Cgroup bounds the memory and the process count of every process in it
// together: a sandbox (one run, or a long-lived workspace) whose
// processes, however many it forks, share one memory limit and one pids
// limit. It is a cgroup v2 directory, or on a cgroup v1 host a directory
// in the memory hierarchy and one in the pids hierarchy, made under
// rllm's own cgroup (or, where rllm's own cannot hold children with
// those controllers, under the hierarchy's root). Processes enter it at
// their start (Start), so nothing they fork escapes it; Remove kills
// whatever is left and removes the directories.
type Cgroup struct {
	v2     string // the cgroup v2 directory, or ""
	memory string // v1: the memory controller's directory
	pids   string // v1: the pids controller's directory
	closed atomic.Bool
}

// CgroupStats is what a cgroup's controllers counted.
type CgroupStats struct {
	// OOMKills counts processes the kernel killed because the cgroup
	// was out of memory.
	OOMKills int64
	// MemoryLimitHits counts the times the cgroup's memory reached its
	// limit (memory.events max on v2, memory.failcnt on v1), whether or
	// not reclaiming page cache then made room.
	MemoryLimitHits int64
	// PeakMemoryBytes is the largest memory use seen (0 when the kernel
	// does not report it).
	PeakMemoryBytes int64
	// ForkRefusals counts forks and clones the pids limit refused.
	ForkRefusals int64
}

// cgroupHost is where this process may make cgroups, found once.
type cgroupHost struct {
	v2           string // parent directory of new v2 cgroups
	memory, pids string // v1 parent directories
	mounts       cgroupMounts
	err          error // why no cgroup can be made here
}

var (
	announceOnce sync.Once
	cgroupOnce   sync.Once
	cgroupAt     cgroupHost
	cgroupSeq    atomic.Int64
)

// hostCgroups finds, once, where cgroups with the memory and pids
// controllers can be made, and proves it by making and removing one.
func hostCgroups() cgroupHost {
	cgroupOnce.Do(func() {
		hosts, err := findCgroupParents()
		if err != nil {
			cgroupAt.err = err
			return
		}
		var errs []error
		for _, h := range hosts {
			cg, err := h.create(Limits{MemoryBytes: 64 << 20, Processes: 8}, 0)
			if err == nil {
				err = cg.Remove()
			}
			if err == nil {
				cgroupAt = h
				return
			}
			errs = append(errs, err)
		}
		cgroupAt.err = errors.Join(errs...)
	})
	return cgroupAt
}

// announceCgroups says once, when a bwrap or unsafe-host backend opens,
// which limits bound each process rather than the whole sandbox.
func announceCgroups() {
	announceOnce.Do(func() { noteCgroups(Logger, CgroupsAvailable()) })
}

// noteCgroups logs, when err says no cgroup can be made, which limits
// are per process.
func noteCgroups(log *slog.Logger, err error) {
	if err != nil {
		log.Warn("sandbox: sandbox.limits.memory_mb and sandbox.limits.processes bound each process of a run (RLIMIT_AS, RLIMIT_NPROC), not the run as a whole: no cgroup can be made here (" +
			err.Error() + "); run rllm as root or in a cgroup delegated to its user to bound the whole sandbox")
	}
}

// CgroupsAvailable reports whether NewCgroup can work here, and if not,
// why (not root and no delegated cgroup, no memory or pids controller).
func CgroupsAvailable() error { return hostCgroups().err }

// NewCgroup makes a cgroup whose processes together may use at most
// l.MemoryBytes of memory (no swap) and run at most l.Processes
// processes and threads at once (plus extra, for a supervisor such as
// bwrap's own processes). A zero field is not limited.
func NewCgroup(l Limits, extra int) (*Cgroup, error) {
	h := hostCgroups()
	if h.err != nil {
		return nil, h.err
	}
	return h.create(l, extra)
}

func (h cgroupHost) create(l Limits, extra int) (*Cgroup, error) {
	name := fmt.Sprintf("rllm-%d-%d", os.Getpid(), cgroupSeq.Add(1))
	cg := &Cgroup{}
	var err error
	if h.v2 != "" {
		cg.v2 = filepath.Join(h.v2, name)
		err = os.Mkdir(cg.v2, 0o755)
	} else {
		cg.memory, cg.pids = filepath.Join(h.memory, name), filepath.Join(h.pids, name)
		if err = os.Mkdir(cg.memory, 0o755); err == nil {
			if err = os.Mkdir(cg.pids, 0o755); err != nil {
				os.Remove(cg.memory)
			}
		}
	}
	if err != nil {
		return nil, fmt.Errorf("sandbox: cgroup: %w", err)
	}
	if err := cg.limit(l, extra); err != nil {
		cg.Remove()
		return nil, fmt.Errorf("sandbox: cgroup: %w", err)
	}
	return cg, nil
}

func (cg *Cgroup) limit(l Limits, extra int) error {
	mem, pids := "max", "max"
	if l.MemoryBytes > 0 {
		mem = strconv.FormatInt(l.MemoryBytes, 10)
	}
	if l.Processes > 0 {
		pids = strconv.Itoa(l.Processes + extra)
	}
	if cg.v2 != "" {
		if err := writeCgroupFile(cg.v2, "memory.max", mem); err != nil {
			return err
		}
		// No swap: the limit is memory, not memory plus swap (absent
		// where the kernel has no swap accounting).
		if err := writeCgroupFile(cg.v2, "memory.swap.max", "0"); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return writeCgroupFile(cg.v2, "pids.max", pids)
	}
	if mem == "max" {
		mem = "-1"
	}
	if err := writeCgroupFile(cg.memory, "memory.limit_in_bytes", mem); err != nil {
		return err
	}
	if err := writeCgroupFile(cg.memory, "memory.memsw.limit_in_bytes", mem); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return writeCgroupFile(cg.pids, "pids.max", pids)
}

// Start starts cmd inside the cgroup: on v2 the kernel creates it there
// (clone3 CLONE_INTO_CGROUP); on v1 it is forked from a thread moved into
// the cgroup for the moment of the fork. Either way the child is in the
// cgroup before it runs an instruction, so nothing it forks escapes.
func (cg *Cgroup) Start(cmd *exec.Cmd) error {
	if cg.v2 != "" {
		dir, err := os.Open(cg.v2)
		if err != nil {
			return fmt.Errorf("sandbox: cgroup: %w", err)
		}
		defer dir.Close()
		if cmd.SysProcAttr == nil {
			cmd.SysProcAttr = &syscall.SysProcAttr{}
		}
		cmd.SysProcAttr.UseCgroupFD = true
		cmd.SysProcAttr.CgroupFD = int(dir.Fd())
		return cmd.Start()
	}
	// cgroup v1 places threads, and a child starts in its forking
	// thread's cgroups. The thread goes back to where it was before any
	// other goroutine may run on it; if it cannot, it is never unlocked
	// and so ends with this goroutine (and a child whose parent-death
	// signal is tied to the thread dies with it).
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		tid := strconv.Itoa(unix.Gettid())
		back, err := threadCgroups()
		if err != nil {
			errc <- err
			return
		}
		if err := cg.add(tid, "tasks"); err != nil {
			errc <- fmt.Errorf("sandbox: cgroup: %w", err)
			_ = back.restore(tid) // a half move is undone too
			runtime.UnlockOSThread()
			return
		}
		err = cmd.Start()
		if rerr := back.restore(tid); rerr != nil {
			if err == nil {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
			}
			errc <- fmt.Errorf("sandbox: cgroup: moving rllm's thread back: %w", rerr)
			return // still locked: the thread ends
		}
		runtime.UnlockOSThread()
		errc <- err
	}()
	return <-errc
}

// add writes id to file (cgroup.procs for a process, tasks for a v1
// thread) in each of the cgroup's directories.
func (cg *Cgroup) add(id, file string) error {
	for _, d := range cg.dirs() {
		if err := writeCgroupFile(d, file, id); err != nil {
			return err
		}
	}
	return nil
}

func (cg *Cgroup) dirs() []string {
	if cg.v2 != "" {
		return []string{cg.v2}
	}
	return []string{cg.memory, cg.pids}
}

// Stats reads the controllers' counters.
func (cg *Cgroup) Stats() (CgroupStats, error) {
	var s CgroupStats
	if cg.v2 != "" {
		ev, err := readKeyed(filepath.Join(cg.v2, "memory.events"))
		if err != nil {
			return s, err
		}
		s.OOMKills, s.MemoryLimitHits = ev["oom_kill"], ev["max"]
		s.PeakMemoryBytes, _ = readInt(filepath.Join(cg.v2, "memory.peak"))
		pe, err := readKeyed(filepath.Join(cg.v2, "pids.events"))
		if err != nil {
			return s, err
		}
		s.ForkRefusals = pe["max"]
		return s, nil
	}
	oc, err := readKeyed(filepath.Join(cg.memory, "memory.oom_control"))
	if err != nil {
		return s, err
	}
	s.OOMKills = oc["oom_kill"]
	if s.MemoryLimitHits, err = readInt(filepath.Join(cg.memory, "memory.failcnt")); err != nil {
		return s, err
	}
	s.PeakMemoryBytes, _ = readInt(filepath.Join(cg.memory, "memory.max_usage_in_bytes"))
	pe, err := readKeyed(filepath.Join(cg.pids, "pids.events"))
	if err != nil {
		return s, err
	}
	s.ForkRefusals = pe["max"]
	return s, nil
}

// Remove kills every process still in the cgroup and removes it; calling
// it again does nothing.
func (cg *Cgroup) Remove() error {
	if cg.closed.Swap(true) {
		return nil
	}
	var errs []error
	for _, d := range cg.dirs() {
		if err := removeCgroupDir(d); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// removeCgroupDir kills what is in d (cgroup.kill where the kernel has
// it, else each listed process) until it is empty, then removes d. A
// process dies within moments of SIGKILL; one stuck in the kernel keeps
// the directory, and the error says so.
func removeCgroupDir(d string) error {
	if _, err := os.Stat(d); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	_ = writeCgroupFile(d, "cgroup.kill", "1")
	var err error
	wait := 500 * time.Microsecond
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		if err = os.Remove(d); err == nil || errors.Is(err, os.ErrNotExist) {
			return nil
		}
		b, rerr := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		if rerr != nil {
			break
		}
		for _, f := range strings.Fields(string(b)) {
			// Never rllm itself (a thread of it left in a v1 cgroup by a
			// failed move lists its process here).
			if pid, err := strconv.Atoi(f); err == nil && pid > 0 && pid != os.Getpid() {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		time.Sleep(wait)
		wait = min(2*wait, 50*time.Millisecond)
	}
	return fmt.Errorf("sandbox: cgroup %s: %w", d, err)
}

func writeCgroupFile(dir, name, value string) error {
	f, err := os.OpenFile(filepath.Join(dir, name), os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(value)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing %q to %s: %w", value, filepath.Join(dir, name), err)
	}
	return nil
}

// readKeyed reads a "key value" per line file (memory.events, pids.events,
// memory.oom_control).
func readKeyed(path string) (map[string]int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
			out[k] = n
		}
	}
	return out, nil
}

func readInt(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

// cgroupMounts are the mount points of the cgroup hierarchies: the v2 one
// and the v1 ones by controller.
type cgroupMounts struct {
	v2 string
	v1 map[string]string // controller -> mount point
}

func readCgroupMounts() (cgroupMounts, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return cgroupMounts{}, err
	}
	return parseMountinfo(b), nil
}

// parseMountinfo reads /proc/self/mountinfo's cgroup lines (root "/"
// mounts only: a bind of a subtree does not show the whole hierarchy).
func parseMountinfo(b []byte) cgroupMounts {
	m := cgroupMounts{v1: map[string]string{}}
	for _, line := range strings.Split(string(b), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		if !ok {
			continue
		}
		f, pf := strings.Fields(pre), strings.Fields(post)
		if len(f) < 5 || len(pf) < 3 || f[3] != "/" {
			continue
		}
		switch pf[0] {
		case "cgroup2":
			if m.v2 == "" {
				m.v2 = f[4]
			}
		case "cgroup":
			for _, opt := range strings.Split(pf[2], ",") {
				if opt == "memory" || opt == "pids" {
					m.v1[opt] = f[4]
				}
			}
		}
	}
	return m
}

// parseProcCgroup reads /proc/PID/cgroup: the v2 path ("0::/path") and
// the v1 path of each controller.
func parseProcCgroup(b []byte) (v2 string, v1 map[string]string) {
	v1 = map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			v2 = parts[2]
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			v1[c] = parts[2]
		}
	}
	return v2, v1
}

// findCgroupParents lists, best first, where new cgroups may go: on a
// host whose memory and pids controllers are v1 hierarchies (v1 or
// hybrid), under rllm's own cgroup in each; on a v2 host, each of rllm's
// own cgroup, its parent (a delegated subtree: rllm's own is a leaf
// holding processes, which v2 lets have no controlled children) and the
// hierarchy's root, where memory and pids are already enabled for
// children. Controllers are never enabled here: that would change the
// host's cgroup tree beyond rllm's own cgroups.
func findCgroupParents() ([]cgroupHost, error) {
	mounts, err := readCgroupMounts()
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, err
	}
	v2path, v1paths := parseProcCgroup(b)
	if mounts.v1["memory"] != "" || mounts.v1["pids"] != "" {
		if mounts.v1["memory"] == "" || mounts.v1["pids"] == "" {
			return nil, errors.New("the host has a cgroup v1 memory or pids hierarchy but not both")
		}
		return []cgroupHost{{
			memory: filepath.Join(mounts.v1["memory"], v1paths["memory"]),
			pids:   filepath.Join(mounts.v1["pids"], v1paths["pids"]),
			mounts: mounts,
		}}, nil
	}
	if mounts.v2 == "" {
		return nil, errors.New("no cgroup hierarchy is mounted")
	}
	own := filepath.Join(mounts.v2, v2path)
	var out []cgroupHost
	for _, p := range []string{own, filepath.Dir(own), mounts.v2} {
		if !strings.HasPrefix(p, mounts.v2) || !controlsChildren(p) || slices.ContainsFunc(out, func(h cgroupHost) bool { return h.v2 == p }) {
			continue
		}
		out = append(out, cgroupHost{v2: p, mounts: mounts})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("neither %s, its parent nor the root has the memory and pids controllers enabled for its children", own)
	}
	return out, nil
}

// controlsChildren reports whether p's children get the memory and pids
// controllers.
func controlsChildren(p string) bool {
	b, err := os.ReadFile(filepath.Join(p, "cgroup.subtree_control"))
	if err != nil {
		return false
	}
	f := strings.Fields(string(b))
	return slices.Contains(f, "memory") && slices.Contains(f, "pids")
}

// threadPlaces is where the calling thread sits in the v1 memory and
// pids hierarchies, to move it back after a Start.
type threadPlaces struct{ dirs []string }

func threadCgroups() (threadPlaces, error) {
	mounts := hostCgroups().mounts
	b, err := os.ReadFile("/proc/thread-self/cgroup")
	if err != nil {
		return threadPlaces{}, err
	}
	_, v1 := parseProcCgroup(b)
	return threadPlaces{dirs: []string{
		filepath.Join(mounts.v1["memory"], v1["memory"]),
		filepath.Join(mounts.v1["pids"], v1["pids"]),
	}}, nil
}

func (t threadPlaces) restore(tid string) error {
	var errs []error
	for _, d := range t.dirs {
		if err := writeCgroupFile(d, "tasks", tid); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
