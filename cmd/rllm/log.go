package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	envexec "github.com/rllm-org/rllm-go/pkg/env/exec"
	"github.com/rllm-org/rllm-go/pkg/env/openenv"
	"github.com/rllm-org/rllm-go/pkg/sandbox"
	"github.com/rllm-org/rllm-go/pkg/tool"
)

// rllm's one logger for diagnostics on stderr is log/slog: it is in the
// standard library, so every package can take a *slog.Logger without a
// dependency, and its JSON handler gives the one-object-per-line stream
// that --output json promises. (zerolog is faster, but a CLI logs a few
// lines a second; speed buys nothing here.)
//
// Text: "rllm: message key=value", warnings as "rllm: warning: ...".
// JSON: {"time":...,"level":"ERROR","event":"error","message":...,...}
// ("event" and "message" as in the trainer's JSON progress lines).

// newLogger writes to w as JSON lines or as text.
func newLogger(w io.Writer, asJSON bool) *slog.Logger {
	if asJSON {
		return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{
			ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
				if len(groups) == 0 && a.Key == slog.MessageKey {
					a.Key = "message"
				}
				return a
			},
		}))
	}
	return slog.New(&textHandler{w: w, mu: &sync.Mutex{}})
}

// usePackageLoggers points the packages that log on their own (exec
// and OpenEnv envs relaying their children's stderr and their waits, stdio
// MCP servers' stderr, the sandbox's notes) at the command's logger, so their lines keep its form:
// one JSON object a line with --output json, "rllm: ..." otherwise.
func usePackageLoggers(l *slog.Logger) {
	l = l.With(slog.String("event", "log"))
	envexec.Logger, openenv.Logger, sandbox.Logger, tool.Logger = l, l, l, l
}

// packageLoggers returns a function that puts the package loggers back
// as they are now (App.Run restores them when the command ends).
func packageLoggers() (restore func()) {
	e, o, s, t := envexec.Logger, openenv.Logger, sandbox.Logger, tool.Logger
	return func() { envexec.Logger, openenv.Logger, sandbox.Logger, tool.Logger = e, o, s, t }
}

// logExit logs the line that says why a command exits with code: at
// ERROR, except an interruption (Ctrl-C, exit 130), a clean stop the user
// asked for, which is INFO with the event "interrupted".
func logExit(l *slog.Logger, code int, msg string) {
	level, event := slog.LevelError, "error"
	if code == exitInterrupted {
		level, event = slog.LevelInfo, "interrupted"
	}
	l.LogAttrs(context.Background(), level, msg, slog.String("event", event), slog.Int("exit_code", code))
}

// logEvent names the kind of a JSON log line: "error" for errors, "log"
// otherwise.
func logEvent(level slog.Level) string {
	if level >= slog.LevelError {
		return "error"
	}
	return "log"
}

// logf logs one line at a level with its event kind.
func logf(l *slog.Logger, level slog.Level, msg string, attrs ...slog.Attr) {
	attrs = append([]slog.Attr{slog.String("event", logEvent(level))}, attrs...)
	l.LogAttrs(context.Background(), level, msg, attrs...)
}

// textHandler prints "rllm: [warning: ]message key=value ...".
type textHandler struct {
	w     io.Writer
	mu    *sync.Mutex
	attrs []slog.Attr
}

func (h *textHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }

func (h *textHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString("rllm: ")
	if r.Level == slog.LevelWarn {
		b.WriteString("warning: ")
	}
	b.WriteString(r.Message)
	write := func(a slog.Attr) bool {
		if a.Key == "event" || a.Key == "exit_code" {
			return true // for programs reading JSON; the text says it already
		}
		v := a.Value.Resolve().String()
		if v == "" || strings.ContainsAny(v, " \t\n\"=") || !utf8.ValidString(v) {
			v = strconv.Quote(v) // as slog's text handler does: the line reads back
		}
		fmt.Fprintf(&b, " %s=%s", a.Key, v)
		return true
	}
	for _, a := range h.attrs {
		write(a)
	}
	r.Attrs(write)
	b.WriteByte('\n')
	h.mu.Lock()
	defer h.mu.Unlock()
	_, err := io.WriteString(h.w, b.String())
	return err
}

func (h *textHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &textHandler{w: h.w, mu: h.mu, attrs: append(append([]slog.Attr{}, h.attrs...), as...)}
}

func (h *textHandler) WithGroup(string) slog.Handler { return h }
