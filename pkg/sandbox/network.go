package sandbox

import (
	"errors"
	"strconv"
	"sync"
)

// The network of a workspace is one host Unix socket. Inside the
// sandbox's own network namespace (loopback only) a forwarder listens on
// 127.0.0.1:Port and relays every connection to the socket, bound into
// the sandbox at SocketPath; it then runs the command as its child, waits
// for it, and reports what the kernel counted of the connections the
// command tried elsewhere (another port, another host, DNS), which all
// fail: there is no route and no other listener.
//
// The forwarder is rllm itself, re-executed as the hidden subcommand
// ForwardCommand: a static binary (CGO_ENABLED=0) bound read-only at
// ForwarderPath runs in any image, where python3 or node may be missing
// or another version. The CLI names the binary with SetSelf.

// ForwardCommand is the hidden first argument that makes rllm run the
// forwarder (ForwardMain).
const ForwardCommand = "__sandbox-forward"

// Paths inside a sandbox with a network.
const (
	// SocketPath is where the host socket is bound.
	SocketPath = "/run/rllm/gateway.sock"
	// ForwarderPath is where the rllm binary is bound read-only.
	ForwarderPath = "/run/rllm/rllm"
	// HomeDir is a workspace's private home: writable, kept between
	// commands, never part of the task's files (a harness's settings and
	// state go there).
	HomeDir = "/home/rllm"
	// DefaultPort is Network.Port's default.
	DefaultPort = 8000
)

var selfBin struct {
	mu   sync.Mutex
	path string
}

// SetSelf names the host binary that runs ForwardCommand (rllm: the CLI
// passes its own executable; a test binary passes itself and dispatches
// ForwardCommand in TestMain). Workspaces with a Network need it.
func SetSelf(path string) {
	selfBin.mu.Lock()
	selfBin.path = path
	selfBin.mu.Unlock()
}

// forwarder is the binary SetSelf named, or an error saying it is unset.
func forwarder() (string, error) {
	selfBin.mu.Lock()
	defer selfBin.mu.Unlock()
	if selfBin.path == "" {
		return "", errors.New("sandbox: a workspace with a network needs the forwarder binary (sandbox.SetSelf was not called)")
	}
	return selfBin.path, nil
}

// NetReport is what the forwarder reports when its command ends.
type NetReport struct {
	// Forwarded counts the connections relayed to the socket.
	Forwarded int `json:"forwarded"`
	// Denied counts connection attempts the network refused: TCP
	// connects to a port nobody listens on, and packets with no route
	// (another host, DNS), as the kernel's SNMP counters of the
	// sandbox's network namespace say.
	Denied int `json:"denied"`
	// Error is set when the forwarder itself failed.
	Error string `json:"error,omitempty"`
}

// forwardArgs is the argv prefix that runs a command behind the
// forwarder: the forwarder at ForwarderPath relays 127.0.0.1:port to
// socket (its path inside the sandbox) and reports to the descriptor
// report ("--report-fd", "4") or the file ("--report-file", PATH).
func forwardArgs(socket string, port int, report ...string) []string {
	return append(append([]string{ForwarderPath, ForwardCommand, "--socket", socket, "--port", strconv.Itoa(port)}, report...), "--")
}
