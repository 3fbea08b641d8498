// Package fakedocker is an in-process stand-in for a Docker daemon's
// Engine API on a Unix socket, for tests of what a real daemon cannot be
// made to do on demand: lack an image while answering, or stop in the
// middle of a command. It speaks the endpoints the docker sandbox backend
// calls, with the real paths, status codes, headers and JSON fields (API
// version 1.41); containers and execs are bookkeeping only, and a started
// command runs until the test says how it ends.
package fakedocker

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
)

// APIVersion is the version the fake reports.
const APIVersion = "1.41"

// Server is a fake daemon listening on a Unix socket.
type Server struct {
	// Images are the images the daemon has (by name or id).
	Images map[string]bool
	// ExecStarted receives an exec's id when a command starts (when
	// there is room: it never blocks the server).
	ExecStarted chan string

	path string
	ln   net.Listener
	srv  *http.Server

	mu       sync.Mutex
	next     int
	hijacked []net.Conn
	stopped  bool
}

// Start serves a fake daemon on a Unix socket at path.
func Start(path string, images ...string) (*Server, error) {
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	s := &Server{Images: map[string]bool{}, ExecStarted: make(chan string, 16), path: path, ln: ln}
	for _, im := range images {
		s.Images[im] = true
	}
	s.srv = &http.Server{Handler: http.HandlerFunc(s.serve)}
	go s.srv.Serve(ln)
	return s, nil
}

// Host is the DOCKER_HOST that reaches the fake.
func (s *Server) Host() string { return "unix://" + s.path }

// Stop is the daemon dying: the listener closes and so does every
// connection, the attached command streams included.
func (s *Server) Stop() {
	s.mu.Lock()
	s.stopped = true
	conns := s.hijacked
	s.hijacked = nil
	s.mu.Unlock()
	_ = s.srv.Close()
	for _, c := range conns {
		_ = c.Close()
	}
}

var versioned = regexp.MustCompile(`^/v[0-9.]+(/.*)$`)

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func notFound(w http.ResponseWriter, what string) {
	writeJSON(w, http.StatusNotFound, map[string]string{"message": what})
}

func (s *Server) id(prefix string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.next++
	return fmt.Sprintf("%s%062d", prefix, s.next)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	if m := versioned.FindStringSubmatch(p); m != nil {
		p = m[1]
	}
	w.Header().Set("Api-Version", APIVersion)
	w.Header().Set("Server", "Docker/20.10.24 (linux)")
	parts := strings.Split(strings.Trim(p, "/"), "/")
	switch {
	case p == "/_ping":
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "OK")
	case len(parts) >= 3 && parts[0] == "images" && parts[len(parts)-1] == "json" && r.Method == http.MethodGet:
		name := strings.Join(parts[1:len(parts)-1], "/")
		if !s.Images[name] {
			notFound(w, "No such image: "+name)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"Id": "sha256:" + strings.Repeat("ab", 32), "RepoTags": []string{name}, "Config": map[string]any{}})
	case p == "/containers/create" && r.Method == http.MethodPost:
		var body struct{ Image string }
		_ = json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&body)
		if !s.Images[body.Image] {
			notFound(w, "No such image: "+body.Image)
			return
		}
		writeJSON(w, http.StatusCreated, map[string]any{"Id": s.id("c"), "Warnings": []string{}})
	case p == "/containers/json":
		writeJSON(w, http.StatusOK, []any{})
	case len(parts) == 3 && parts[0] == "containers" && (parts[2] == "start" || parts[2] == "kill"):
		w.WriteHeader(http.StatusNoContent)
	case len(parts) == 2 && parts[0] == "containers" && r.Method == http.MethodDelete:
		w.WriteHeader(http.StatusNoContent)
	case len(parts) == 3 && parts[0] == "containers" && parts[2] == "json":
		writeJSON(w, http.StatusOK, map[string]any{"Id": parts[1], "State": map[string]any{"Running": true, "OOMKilled": false}})
	case len(parts) == 3 && parts[0] == "containers" && parts[2] == "archive":
		s.archive(w, r)
	case len(parts) == 3 && parts[0] == "containers" && parts[2] == "exec" && r.Method == http.MethodPost:
		writeJSON(w, http.StatusCreated, map[string]any{"Id": s.id("e")})
	case len(parts) == 3 && parts[0] == "exec" && parts[2] == "start":
		s.execStart(w, parts[1])
	case len(parts) == 3 && parts[0] == "exec" && parts[2] == "json":
		writeJSON(w, http.StatusOK, map[string]any{"ID": parts[1], "Running": true, "ExitCode": nil})
	default:
		notFound(w, "page not found: "+r.Method+" "+p)
	}
}

// archive answers the archive endpoints: every path is a directory, and
// uploads are read to their end.
func (s *Server) archive(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodHead, http.MethodGet:
		stat, _ := json.Marshal(map[string]any{"name": "work", "size": 4096, "mode": 0o20000000755, "mtime": "2026-01-01T00:00:00Z", "linkTarget": ""})
		w.Header().Set("X-Docker-Container-Path-Stat", base64.StdEncoding.EncodeToString(stat))
		w.WriteHeader(http.StatusOK)
	case http.MethodPut:
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusOK)
	default:
		notFound(w, "archive: "+r.Method)
	}
}

// execStart hijacks the connection as the daemon does and leaves the
// command running: the stream stays open, silent, until Stop.
func (s *Server) execStart(w http.ResponseWriter, id string) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		http.Error(w, "no hijacking", http.StatusInternalServerError)
		return
	}
	conn, buf, err := hj.Hijack()
	if err != nil {
		return
	}
	_, _ = buf.WriteString("HTTP/1.1 101 UPGRADED\r\nContent-Type: application/vnd.docker.multiplexed-stream\r\nConnection: Upgrade\r\nUpgrade: tcp\r\nApi-Version: " + APIVersion + "\r\n\r\n")
	_ = buf.Flush()
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		conn.Close()
		return
	}
	s.hijacked = append(s.hijacked, conn)
	s.mu.Unlock()
	select {
	case s.ExecStarted <- id:
	default:
	}
	// Read what the client sends (stdin) until the connection ends.
	go func() { _, _ = io.Copy(io.Discard, conn) }()
}
