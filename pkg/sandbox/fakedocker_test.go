package sandbox

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rllm-org/rllm-go/internal/fakedocker"
	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// fakeDaemon starts a fake Engine API with images and points
// DOCKER_HOST at it.
func fakeDaemon(t *testing.T, images ...string) *fakedocker.Server {
	t.Helper()
	// A short directory: a Unix socket's path has a small limit.
	dir, err := os.MkdirTemp("", "fd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	s, err := fakedocker.Start(filepath.Join(dir, "docker.sock"), images...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	t.Setenv("DOCKER_HOST", s.Host())
	return s
}

// TestDockerNoImage: a daemon that answers without the image refuses the
// backend at start, naming the image, sandbox.docker.image and how to get
// it; so does auto where bwrap is missing (it used to pick docker and call
// the configuration valid, then fail every program with "No such image").
func TestDockerNoImage(t *testing.T) {
	fakeDaemon(t)
	tests := []struct {
		name  string
		c     Config
		image string
		fix   string
	}{
		{"the local base image", Config{Backend: BackendDocker}, BaseImage(), "scripts/docker-setup.sh"},
		{"a named image", Config{Backend: BackendDocker, DockerImage: "python:3.12-slim"}, "python:3.12-slim", "docker pull"},
		{"auto without bwrap", Config{Backend: BackendAuto}, BaseImage(), "scripts/docker-setup.sh"},
	}
	old := lookPath
	lookPath = func(string) (string, error) { return "", exec.ErrNotFound }
	defer func() { lookPath = old }()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.c.Limits = small
			_, err := Open(context.Background(), tc.c)
			var ue *usererr.Error
			if !errors.As(err, &ue) || ue.Subject != "sandbox.docker.image" || !strings.Contains(err.Error(), tc.image) || !strings.Contains(err.Error(), tc.fix) {
				t.Fatalf("err %v, want a user error naming sandbox.docker.image, %s and %q", err, tc.image, tc.fix)
			}
		})
	}
}

// TestDockerDaemonStops: the daemon dies while a command runs: Run ends
// with an error that says so, instead of waiting for the command.
func TestDockerDaemonStops(t *testing.T) {
	s := fakeDaemon(t, BaseImage())
	d, err := OpenDocker(context.Background(), Config{Limits: small})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		lim := small
		lim.WallTime = time.Hour // only the daemon's end can end it
		_, err := d.Run(ctx, Request{Command: []string{"sleep", "3600"}, Files: map[string][]byte{"f": []byte("x")}, Limits: lim})
		done <- err
	}()
	select {
	case <-s.ExecStarted:
	case err := <-done:
		t.Fatalf("Run ended before its command started: %v", err)
	}
	s.Stop()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "the Docker daemon stopped answering") {
			t.Fatalf("err %v", err)
		}
	case <-ctx.Done():
		t.Fatal("Run still waits after the daemon stopped")
	}
	// What comes next fails at once, the same way.
	if _, err := d.Run(ctx, Request{Command: []string{"true"}}); err == nil || !strings.Contains(err.Error(), "the Docker daemon stopped answering") {
		t.Fatalf("after the stop: %v", err)
	}
}
