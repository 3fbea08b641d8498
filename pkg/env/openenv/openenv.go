// Package openenv is the `openenv` environment: episodes against OpenEnv
// servers (Meta / Hugging Face) over their /ws WebSocket, one connection
// per episode:
//
//	→ {"type": "reset", "data": {"seed": N, "task": {<row>}}}
//	→ {"type": "step", "data": {<action fields>}}
//	→ {"type": "close"}
//	← {"type": "observation", "data": {"observation": {...}, "reward": number|bool|null, "done": bool}}
//	← {"type": "error", "data": {"message": "...", "code": "CAPACITY_REACHED" | ...}}
//
// Servers are checked with GET /health before their first episode (a
// booting server is waited for, within env.args.connect_timeout_s).
// Episodes are spread over env.args.url; a server at capacity is left for
// another (or waited for) until env.args.connect_timeout_s.
package openenv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/rllm-org/rllm-go/internal/ctxsleep"
	"github.com/rllm-org/rllm-go/pkg/env"
	"github.com/rllm-org/rllm-go/pkg/env/exec"
	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/registry"
	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// Params are the openenv env's arguments; none comes from a task row.
type Params struct {
	URL             []string `arg:"url" doc:"base URL of an OpenEnv server, or a list of them (episodes are spread over them), e.g. http://127.0.0.1:8001"`
	ActionField     string   `arg:"action_field" doc:"the action field that receives the agent's reply, e.g. message or code; empty: the reply is parsed as a JSON action object"`
	StepTimeoutS    float64  `arg:"step_timeout_s" default:"60" range:"(0,86400]" doc:"seconds the server may take to answer one frame"`
	ConnectTimeoutS float64  `arg:"connect_timeout_s" default:"300" range:"(0,86400]" doc:"seconds an episode may wait for a server that is still booting (GET /health refused or 5xx) or has no room (CAPACITY_REACHED) before it fails"`
}

func init() {
	env.Register(env.Definition{
		Name:        "openenv",
		Description: "an OpenEnv server (Docker image or uv run server): episodes over its /ws WebSocket, reward and done from its observations",
		Params:      Params{},
		Validate:    func(v registry.Values) error { _, err := parseURLs(registry.As[Params](v).URL); return err },
		New: func(task episode.Task, v registry.Values) (env.Env, error) {
			c, err := clientFor(registry.As[Params](v))
			if err != nil {
				return nil, err
			}
			return &Episode{c: c, task: task}, nil
		},
	})
}

func parseURLs(raw []string) ([]*url.URL, error) {
	if len(raw) == 0 {
		return nil, usererr.Errorf("env.args.url is empty; set it to an OpenEnv server, e.g. env.args.url=http://127.0.0.1:8001")
	}
	out := make([]*url.URL, 0, len(raw))
	for _, s := range raw {
		u, err := url.Parse(strings.TrimRight(strings.TrimSpace(s), "/"))
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, usererr.Errorf("env.args.url %q is not an http(s) URL such as http://127.0.0.1:8001", s)
		}
		out = append(out, u)
	}
	return out, nil
}

// Logger receives the lines that say what the env is waiting for (a
// server that does not answer yet, a server with no room). The CLI may
// replace it.
var Logger = slog.Default()

// Client spreads episodes over a set of servers.
type Client struct {
	p       Params
	servers []*server
	next    atomic.Uint64
	HTTP    *http.Client
	// Log, when set, is used instead of Logger.
	Log *slog.Logger
}

func (c *Client) log() *slog.Logger {
	if c.Log != nil {
		return c.Log
	}
	return Logger
}

type server struct {
	base *url.URL
	// checking is held by the one episode polling /health; healthy is
	// set once the server has answered 200 (only success is kept: a
	// booting server, or an episode cancelled mid-check, is asked again).
	checking chan struct{}
	healthy  atomic.Bool
	// waitSaid and fullSaid: the wait for this server's /health, and for
	// room on it, has been logged (once per server).
	waitSaid, fullSaid atomic.Bool
}

var (
	clientsMu sync.Mutex
	clients   = map[string]*Client{}
)

func clientFor(p Params) (*Client, error) {
	key, _ := json.Marshal(p)
	clientsMu.Lock()
	defer clientsMu.Unlock()
	if c, ok := clients[string(key)]; ok {
		return c, nil
	}
	c, err := NewClient(p)
	if err != nil {
		return nil, err
	}
	clients[string(key)] = c
	return c, nil
}

// NewClient checks p; servers are contacted with the first episode.
func NewClient(p Params) (*Client, error) {
	us, err := parseURLs(p.URL)
	if err != nil {
		return nil, err
	}
	c := &Client{p: p, HTTP: &http.Client{Timeout: 10 * time.Second}}
	for _, u := range us {
		c.servers = append(c.servers, &server{base: u, checking: make(chan struct{}, 1)})
	}
	return c, nil
}

// CheckHealth waits until every server answers GET /health with 200. A
// server that is still booting (a refused connection, a 5xx such as 503)
// is asked again with a growing pause, within env.args.connect_timeout_s;
// an answer that says the URL is not an OpenEnv server (another 4xx)
// fails at once. A server found healthy is not asked again.
func (c *Client) CheckHealth(ctx context.Context) error {
	deadline := time.Now().Add(time.Duration(c.p.ConnectTimeoutS * float64(time.Second)))
	for _, s := range c.servers {
		if err := c.waitHealthy(ctx, s, deadline); err != nil {
			return err
		}
	}
	return nil
}

func (c *Client) waitHealthy(ctx context.Context, s *server, deadline time.Time) error {
	if s.healthy.Load() {
		return nil
	}
	select {
	case s.checking <- struct{}{}:
		defer func() { <-s.checking }()
	case <-ctx.Done():
		return ctx.Err()
	}
	wait := 100 * time.Millisecond
	start := time.Now()
	for !s.healthy.Load() {
		err := c.health(ctx, s.base)
		switch {
		case err == nil:
			s.healthy.Store(true)
			if s.waitSaid.Load() {
				c.log().Info(fmt.Sprintf("OpenEnv server %s answers GET /health after %s", s.base, time.Since(start).Round(time.Second)))
			}
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case !errors.Is(err, errBooting):
			return err
		case !time.Now().Before(deadline):
			return usererr.Errorf("%v, and still did not after env.args.connect_timeout_s (%gs); start it (docker run -p 8001:8000 IMAGE, or uv run server), fix env.args.url or raise env.args.connect_timeout_s", err, c.p.ConnectTimeoutS)
		}
		if !s.waitSaid.Swap(true) {
			// Say at once what the episodes wait for: nothing else shows
			// until the server answers or the wait ends.
			c.log().Warn(fmt.Sprintf("%v; the episodes wait for it, as for a server still booting, up to env.args.connect_timeout_s (%s) before they fail: start it (docker run -p 8001:8000 IMAGE, or uv run server) or fix env.args.url",
				err, time.Until(deadline).Round(time.Second)))
		}
		if err := ctxsleep.Sleep(ctx, min(wait, time.Until(deadline)+time.Millisecond)); err != nil {
			return err
		}
		wait = min(2*wait, 5*time.Second)
	}
	return nil
}

// errBooting marks a /health failure a server that is starting gives.
var errBooting = errors.New("not ready")

func (c *Client) health(ctx context.Context, base *url.URL) error {
	u := base.String() + "/health"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return fmt.Errorf("OpenEnv server %s does not answer GET /health (%v)%w", base, err, quiet(errBooting))
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	switch {
	case resp.StatusCode == http.StatusOK:
		return nil
	case resp.StatusCode >= 500 || resp.StatusCode == http.StatusRequestTimeout || resp.StatusCode == http.StatusTooManyRequests:
		return fmt.Errorf("OpenEnv server %s answers GET /health with %s: %s%w", base, resp.Status, exec.Truncate(string(body), 200), quiet(errBooting))
	}
	return usererr.Errorf("OpenEnv server %s answers GET /health with %s: %s; check env.args.url names an OpenEnv server", base, resp.Status, exec.Truncate(string(body), 200))
}

// quiet wraps err so that %w adds nothing to the message.
func quiet(err error) error { return quietErr{err} }

type quietErr struct{ err error }

func (q quietErr) Error() string { return "" }
func (q quietErr) Unwrap() error { return q.err }

func wsURL(base *url.URL) string {
	u := *base
	if u.Scheme == "https" {
		u.Scheme = "wss"
	} else {
		u.Scheme = "ws"
	}
	u.Path = strings.TrimRight(u.Path, "/") + "/ws"
	return u.String()
}

func (c *Client) frameTimeout() time.Duration {
	return time.Duration(c.p.StepTimeoutS * float64(time.Second))
}

// Episode is one episode on one server connection.
type Episode struct {
	c    *Client
	task episode.Task
	conn *websocket.Conn
	srv  *server
	last any
}

type frame struct {
	Type string          `json:"type"`
	Data json.RawMessage `json:"data,omitempty"`
}

// ErrCapacity marks a server that has no room for another episode.
var ErrCapacity = errors.New("CAPACITY_REACHED")

// Reset connects to a server with room and resets its environment with
// the seed and the task row.
func (e *Episode) Reset(ctx context.Context) (any, map[string]any, error) {
	if err := e.c.CheckHealth(ctx); err != nil {
		return nil, nil, err
	}
	data, err := json.Marshal(map[string]any{"seed": rowSeed(e.task), "task": map[string]any(e.task)})
	if err != nil {
		return nil, nil, fmt.Errorf("openenv: the task row cannot be sent as JSON: %v", err)
	}
	deadline := time.Now().Add(time.Duration(e.c.p.ConnectTimeoutS * float64(time.Second)))
	wait := 100 * time.Millisecond
	var lastErr error
	for attempt := 0; ; attempt++ {
		s := e.c.servers[int(e.c.next.Add(1)-1)%len(e.c.servers)]
		res, err := e.open(ctx, s, data)
		if err == nil {
			e.last = res.Observation
			return res.Observation, res.Info, nil
		}
		e.drop()
		if ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
		lastErr = err
		retry := errors.Is(err, ErrCapacity) || isDialError(err)
		if !retry {
			return nil, nil, err
		}
		if !s.fullSaid.Swap(true) {
			e.c.log().Warn(fmt.Sprintf("%v; episodes wait for room, on it or another of env.args.url, up to env.args.connect_timeout_s (%gs) each", err, e.c.p.ConnectTimeoutS))
		}
		if time.Now().After(deadline) {
			return nil, nil, fmt.Errorf("openenv: no server had room for the episode within env.args.connect_timeout_s (%gs): %w", e.c.p.ConnectTimeoutS, lastErr)
		}
		// Try the next server at once; after a full round, wait.
		if (attempt+1)%len(e.c.servers) == 0 {
			if err := ctxsleep.Sleep(ctx, min(wait, time.Until(deadline)+time.Millisecond)); err != nil {
				return nil, nil, err
			}
			wait = min(2*wait, 5*time.Second)
		}
	}
}

type dialError struct{ err error }

func (d *dialError) Error() string { return d.err.Error() }
func (d *dialError) Unwrap() error { return d.err }

func isDialError(err error) bool {
	var d *dialError
	return errors.As(err, &d)
}

func (e *Episode) open(ctx context.Context, s *server, reset json.RawMessage) (env.StepResult, error) {
	dctx, cancel := context.WithTimeout(ctx, e.c.frameTimeout())
	conn, resp, err := websocket.Dial(dctx, wsURL(s.base), &websocket.DialOptions{HTTPClient: &http.Client{}})
	cancel()
	if resp != nil && resp.Body != nil {
		resp.Body.Close()
	}
	if err != nil {
		return env.StepResult{}, &dialError{fmt.Errorf("OpenEnv server %s: cannot open %s: %v", s.base, wsURL(s.base), err)}
	}
	conn.SetReadLimit(32 << 20)
	e.conn, e.srv = conn, s
	return e.roundTrip(ctx, frame{Type: "reset", Data: reset})
}

// Step sends the action: the reply under action_field, the agent's
// structured action, or the reply parsed as a JSON object. A reply that
// is not a JSON object when one is needed is a format error scored 0,
// not an env failure.
func (e *Episode) Step(ctx context.Context, a episode.Action) (env.StepResult, error) {
	if e.conn == nil {
		return env.StepResult{}, fmt.Errorf("openenv: step before reset")
	}
	var action map[string]any
	switch {
	case len(a.Fields) > 0:
		action = a.Fields
	case e.c.p.ActionField != "":
		action = map[string]any{e.c.p.ActionField: a.Content}
	default:
		if err := json.Unmarshal([]byte(strings.TrimSpace(a.Content)), &action); err != nil || action == nil {
			return env.StepResult{Observation: e.last, Info: map[string]any{
				"format_error": "the reply is not a JSON action object (set env.args.action_field to send it as one field)",
			}}, nil
		}
	}
	data, err := json.Marshal(action)
	if err != nil {
		return env.StepResult{}, err
	}
	res, err := e.roundTrip(ctx, frame{Type: "step", Data: data})
	if err == nil {
		e.last = res.Observation
	}
	return res, err
}

func (e *Episode) roundTrip(ctx context.Context, f frame) (env.StepResult, error) {
	timeout := e.c.frameTimeout()
	fctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	b, _ := json.Marshal(f)
	name := fmt.Sprintf("OpenEnv server %s", e.srv.base)
	if err := e.conn.Write(fctx, websocket.MessageText, b); err != nil {
		return env.StepResult{}, e.connErr(ctx, fctx, name, "sending "+f.Type, timeout, err)
	}
	_, msg, err := e.conn.Read(fctx)
	if err != nil {
		return env.StepResult{}, e.connErr(ctx, fctx, name, "waiting for the answer to "+f.Type, timeout, err)
	}
	var r frame
	if err := json.Unmarshal(msg, &r); err != nil {
		return env.StepResult{}, fmt.Errorf("%s answered %s with a frame that is not JSON: %s", name, f.Type, exec.Truncate(string(msg), 200))
	}
	switch r.Type {
	case "observation":
		res, err := exec.DecodeObservation(r.Data)
		if err != nil {
			return res, fmt.Errorf("%s answered %s with a bad observation: %v", name, f.Type, err)
		}
		return res, nil
	case "error":
		text := exec.ErrorMessage(r.Data)
		if strings.HasPrefix(text, "CAPACITY_REACHED") {
			return env.StepResult{}, fmt.Errorf("%s: %w: %s", name, ErrCapacity, text)
		}
		return env.StepResult{}, fmt.Errorf("%s reported an error for %s: %s", name, f.Type, text)
	}
	return env.StepResult{}, fmt.Errorf("%s answered %s with a frame of type %q; expected observation or error", name, f.Type, r.Type)
}

func (e *Episode) connErr(ctx, fctx context.Context, name, doing string, timeout time.Duration, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if errors.Is(fctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("%s: %w %s after %s (env.args.step_timeout_s)", name, env.ErrTimeout, doing, timeout)
	}
	if cs := websocket.CloseStatus(err); cs != -1 {
		return fmt.Errorf("%s closed the connection while rllm was %s (status %d)", name, doing, cs)
	}
	return fmt.Errorf("%s: connection lost while %s: %v", name, doing, err)
}

func (e *Episode) drop() {
	if e.conn != nil {
		e.conn.CloseNow()
		e.conn = nil
	}
}

// Close sends close and ends the connection.
func (e *Episode) Close() error {
	if e.conn == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	b, _ := json.Marshal(frame{Type: "close"})
	_ = e.conn.Write(ctx, websocket.MessageText, b)
	// The episode is over whatever the server makes of the close.
	_ = e.conn.Close(websocket.StatusNormalClosure, "episode over")
	e.conn = nil
	return nil
}

// rowSeed is the row's integral seed column, else 0.
func rowSeed(task episode.Task) int64 {
	s, _ := exec.RowSeed(task)
	return s
}
