//go:build linux

package sandbox

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// ForwardMain is the forwarder: ForwardCommand's arguments are
// --socket PATH --port N [--report-fd FD] -- COMMAND... It returns the
// command's exit status (128+N for signal N), or 125 when the forwarder
// cannot start it.
func ForwardMain(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet(ForwardCommand, flag.ContinueOnError)
	fs.SetOutput(stderr)
	sock := fs.String("socket", SocketPath, "the Unix socket to forward to")
	port := fs.Int("port", DefaultPort, "the loopback port to listen on")
	reportFD := fs.Int("report-fd", -1, "a file descriptor to write the NetReport to (JSON) at the end")
	reportFile := fs.String("report-file", "", "a file to write the NetReport to (JSON) at the end, where no descriptor can be passed (docker exec)")
	if err := fs.Parse(args); err != nil {
		return 125
	}
	argv := fs.Args()
	var report io.WriteCloser = nopCloser{io.Discard}
	switch {
	case *reportFD >= 0:
		// Not inherited by the command: it cannot forge the report.
		syscall.CloseOnExec(*reportFD)
		report = os.NewFile(uintptr(*reportFD), "report")
	case *reportFile != "":
		f, err := os.OpenFile(*reportFile, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
		if err != nil {
			fmt.Fprintf(stderr, "rllm sandbox forwarder: %v\n", err)
			return 125
		}
		// Opened before the command starts and closed on exec: the
		// command cannot write through this descriptor.
		report = f
	}
	defer report.Close()
	fail := func(err error) int {
		fmt.Fprintf(stderr, "rllm sandbox forwarder: %v\n", err)
		_ = json.NewEncoder(report).Encode(NetReport{Error: err.Error()})
		return 125
	}
	if len(argv) == 0 {
		return fail(errors.New("no command given after --"))
	}
	before := netCounters()
	ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(*port))
	if err != nil {
		return fail(fmt.Errorf("listening on 127.0.0.1:%d: %v", *port, err))
	}
	var forwarded int
	var mu sync.Mutex
	var conns sync.WaitGroup
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			forwarded++
			mu.Unlock()
			conns.Go(func() { relay(c, *sock) })
		}
	}()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	// Signals to the forwarder (a stop) go on to the command.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	if err := cmd.Start(); err != nil {
		ln.Close()
		return fail(fmt.Errorf("starting %s: %v", argv[0], err))
	}
	done := make(chan struct{})
	go func() {
		for {
			select {
			case s := <-sigs:
				_ = cmd.Process.Signal(s)
			case <-done:
				return
			}
		}
	}()
	werr := cmd.Wait()
	close(done)
	ln.Close()
	after := netCounters()
	mu.Lock()
	rep := NetReport{Forwarded: forwarded, Denied: after.denied() - before.denied()}
	mu.Unlock()
	_ = json.NewEncoder(report).Encode(rep)
	if werr != nil && cmd.ProcessState == nil {
		fmt.Fprintf(stderr, "rllm sandbox forwarder: %v\n", werr)
		return 125
	}
	return exitCode(cmd.ProcessState)
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// relay copies c to a fresh connection to the socket and back.
func relay(c net.Conn, sock string) {
	defer c.Close()
	up, err := net.Dial("unix", sock)
	if err != nil {
		return
	}
	defer up.Close()
	var wg sync.WaitGroup
	wg.Go(func() {
		_, _ = io.Copy(up, c)
		if u, ok := up.(*net.UnixConn); ok {
			_ = u.CloseWrite()
		}
	})
	_, _ = io.Copy(c, up)
	if t, ok := c.(*net.TCPConn); ok {
		_ = t.CloseWrite()
	}
	wg.Wait()
}

// snmp holds the counters of /proc/net/snmp and /proc/net/snmp6 (the
// reading process's network namespace).
type snmp map[string]int

// denied is the refused connection attempts: TCP connects answered with
// a reset (no listener), and packets with no route, IPv4 and IPv6.
func (s snmp) denied() int {
	return s["Tcp:AttemptFails"] + s["Ip:OutNoRoutes"] + s["Ip6OutNoRoutes"] + s["Udp:NoPorts"] + s["Udp6NoPorts"]
}

func netCounters() snmp {
	out := snmp{}
	readSNMP(out, "/proc/net/snmp", true)
	readSNMP(out, "/proc/net/snmp6", false)
	return out
}

// readSNMP reads the kernel's counters: /proc/net/snmp is pairs of lines
// ("Tcp: Name1 Name2", "Tcp: 1 2"), /proc/net/snmp6 lines of "Name value".
func readSNMP(out snmp, path string, paired bool) {
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	var header []string
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			continue
		}
		if !paired {
			if n, err := strconv.Atoi(fields[1]); err == nil {
				out[fields[0]] = n
			}
			continue
		}
		if header == nil || header[0] != fields[0] {
			header = fields
			continue
		}
		for i := 1; i < len(fields) && i < len(header); i++ {
			if n, err := strconv.Atoi(fields[i]); err == nil {
				out[header[0]+header[i]] = n
			}
		}
		header = nil
	}
}
