package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/rllm-org/rllm-go/pkg/sandbox"
	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// Signals: the first SIGINT or SIGTERM cancels the command's context, so
// it stops cleanly (train writes a checkpoint, serve answers or closes its
// requests); a second one exits at once, naming what the clean stop had
// left to do. A run ended by a signal exits 128 + its number: 130 for
// SIGINT (Ctrl-C), 143 for SIGTERM, as shells and process managers expect.

// stopSignals are the signals that stop rllm.
var stopSignals = []os.Signal{os.Interrupt, syscall.SIGTERM}

// runWithSignals runs app with signal handling; exit ends the process on
// a second signal (os.Exit; tests pass their own).
func runWithSignals(a *App, args []string, exit func(int)) int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, stopSignals...)
	defer signal.Stop(ch)
	var mu sync.Mutex
	var first os.Signal
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			select {
			case <-done:
				return
			case sig := <-ch:
				mu.Lock()
				if first == nil {
					first = sig
					mu.Unlock()
					cancel()
					continue
				}
				mu.Unlock()
				// The second signal: no more waiting.
				a.diag(slog.LevelError, fmt.Sprintf("%s again: exiting now; left undone: %s", signalName(sig), a.leftUndone()),
					slog.Int("exit_code", signalExit(sig)))
				removeContainers(5 * time.Second)
				exit(signalExit(sig))
				return
			}
		}
	}()
	code := a.Run(ctx, args)
	removeContainers(30 * time.Second)
	mu.Lock()
	sig := first
	mu.Unlock()
	if sig != nil && code == usererr.ExitInterrupted {
		code = signalExit(sig)
	}
	return code
}

// removeContainers removes the docker containers this process still
// has (the workspaces and warm containers of its sandboxes), bounded in
// time (briefly after a second signal, which exits at once otherwise), on
// every way out of the command; a kill -9 leaves them to the next rllm,
// which removes those of dead processes when it opens the docker backend.
func removeContainers(bound time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	sandbox.CloseAll(ctx)
}

func signalExit(sig os.Signal) int {
	if s, ok := sig.(syscall.Signal); ok {
		return 128 + int(s)
	}
	return usererr.ExitInterrupted
}

func signalName(sig os.Signal) string {
	if sig == syscall.SIGTERM {
		return "SIGTERM"
	}
	return "interrupted"
}

// undoneByCommand says what a command's clean stop still does after the
// first signal, for the commands that do something then.
var undoneByCommand = map[string]string{
	"rllm train": "the checkpoint of the last completed step and the final metrics (the run resumes from the newest complete checkpoint)",
	"rllm sft":   "saving the model of the last completed step",
	"rllm eval":  "the report and episodes of the tasks done so far",
	"rllm serve": "answering the requests in flight (their connections are closed)",
}

// leftUndone is what the command's clean stop had left to do.
func (a *App) leftUndone() string {
	a.sigMu.Lock()
	defer a.sigMu.Unlock()
	if a.undone != nil {
		if s := a.undone(); s != "" {
			return s
		}
	}
	if s, ok := undoneByCommand[a.cmdPath]; ok {
		return s
	}
	return "the clean stop"
}

// setUndone lets a command say precisely what its clean stop is doing.
func (a *App) setUndone(f func() string) {
	a.sigMu.Lock()
	a.undone = f
	a.sigMu.Unlock()
}

// diag logs one line from outside the command's goroutine (the signal
// handler), in the format the command's stderr uses.
func (a *App) diag(level slog.Level, msg string, attrs ...slog.Attr) {
	a.sigMu.Lock()
	asJSON := a.jsonStderr
	a.sigMu.Unlock()
	logf(newLogger(a.Stderr, asJSON), level, msg, attrs...)
}
