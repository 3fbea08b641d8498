package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/moby/moby/client"
)

// Containers that never leak: every container rllm creates carries the
// labels below, naming the run (a random id per process) and the process
// that owns it (host, boot, PID namespace, pid and the pid's start time,
// so a pid the kernel gave to another process later is not taken for the
// owner, and a pid of another namespace is never looked up in this one). A
// Docker backend removes its containers when it closes; CloseAll closes
// every backend of the process (the CLI calls it on every exit path); and
// the next rllm that opens the docker backend removes the containers whose
// owner is gone (sweep). Two runs sharing a daemon never remove each
// other's: a container is removed only when its owner is provably dead
// (two rllm, or two test binaries, in sandboxes of their own on one
// daemon's host see different PID namespaces: each leaves the other's
// containers alone until the host reboots).
const (
	LabelRun        = "org.rllm.run"
	LabelOwnerHost  = "org.rllm.owner.host"
	LabelOwnerBoot  = "org.rllm.owner.boot"
	LabelOwnerPID   = "org.rllm.owner.pid"
	LabelOwnerStart = "org.rllm.owner.start"
	// LabelOwnerPIDNS names the PID namespace the pid is in (its
	// inode, as /proc/self/ns/pid shows it: "pid:[4026531836]").
	LabelOwnerPIDNS = "org.rllm.owner.pidns"
)

// owner is a process as the labels name it.
type owner struct {
	run, host, boot, pidns, pid, start string
}

var selfOnce = sync.OnceValue(func() *owner {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	host, _ := os.Hostname()
	pid := os.Getpid()
	ns, _ := os.Readlink("/proc/self/ns/pid")
	return &owner{run: hex.EncodeToString(b), host: host, boot: bootID(), pidns: ns, pid: strconv.Itoa(pid), start: startTime(pid)}
})

// self is this process.
func self() *owner { return selfOnce() }

// labels are the labels of every container this process creates.
func (o *owner) labels() map[string]string {
	return map[string]string{LabelRun: o.run, LabelOwnerHost: o.host, LabelOwnerBoot: o.boot, LabelOwnerPIDNS: o.pidns, LabelOwnerPID: o.pid, LabelOwnerStart: o.start}
}

// bootID is the kernel's id of this boot ("" where there is none).
func bootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// startTime is the start time of process pid in clock ticks since boot
// (field 22 of /proc/PID/stat), "" when there is no such process.
func startTime(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return ""
	}
	return f[19]
}

// ownerGone reports whether the process the labels name has certainly
// ended: it ran on this host, and this host rebooted since, or it ran in
// this PID namespace and its pid is gone or now belongs to a process
// started at another time. Labels of another host, of another PID
// namespace (the same pid there is another process, or none), without a
// namespace (an rllm before it was named: its namespace is unknown), or
// that this process cannot judge, are never gone.
func (o *owner) ownerGone(labels map[string]string) bool {
	pid, err := strconv.Atoi(labels[LabelOwnerPID])
	if err != nil || pid <= 0 || labels[LabelOwnerHost] != o.host || o.start == "" || labels[LabelOwnerStart] == "" {
		return false
	}
	if b := labels[LabelOwnerBoot]; b != "" && o.boot != "" && b != o.boot {
		return true
	}
	if ns := labels[LabelOwnerPIDNS]; ns == "" || ns != o.pidns {
		return false
	}
	return startTime(pid) != labels[LabelOwnerStart]
}

var sweepDone sync.Once

// sweepOnce sweeps once per process.
func sweepOnce(ctx context.Context, cli *client.Client) (removed []string) {
	sweepDone.Do(func() { removed, _ = sweep(ctx, cli, self()) })
	return removed
}

// sweep removes the containers of rllm processes that are gone, and
// returns their ids.
func sweep(ctx context.Context, cli *client.Client, o *owner) ([]string, error) {
	list, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: make(client.Filters).Add("label", LabelOwnerPID)})
	if err != nil {
		return nil, err
	}
	var removed []string
	for _, c := range list.Items {
		if !o.ownerGone(c.Labels) {
			continue
		}
		if _, err := cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); err == nil || isNotFound(err) {
			removed = append(removed, c.ID)
		}
	}
	return removed, nil
}

// The docker backends of this process, for CloseAll.
var backends struct {
	mu  sync.Mutex
	set map[*Docker]bool
}

func register(d *Docker) {
	backends.mu.Lock()
	defer backends.mu.Unlock()
	if backends.set == nil {
		backends.set = map[*Docker]bool{}
	}
	backends.set[d] = true
}

func unregister(d *Docker) {
	backends.mu.Lock()
	defer backends.mu.Unlock()
	delete(backends.set, d)
}

// CloseAll closes every docker backend of this process, removing its
// workspaces and warm containers: the CLI calls it on every exit path (a
// normal end, an error, a signal). It returns once they are removed or
// ctx ends.
func CloseAll(ctx context.Context) {
	backends.mu.Lock()
	list := make([]*Docker, 0, len(backends.set))
	for d := range backends.set {
		list = append(list, d)
	}
	backends.mu.Unlock()
	// The shared pool opens a new backend when it is used again.
	shared.mu.Lock()
	if shared.pool != nil && shared.pool.Backend() == BackendDocker {
		shared.pool, shared.err = nil, nil
	}
	shared.mu.Unlock()
	var wg sync.WaitGroup
	for _, d := range list {
		wg.Add(1)
		go func() { defer wg.Done(); _ = d.Close() }()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
}
