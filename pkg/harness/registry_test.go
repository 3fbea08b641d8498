package harness

import (
	"context"
	"io"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/rllm-org/rllm-go/pkg/usererr"
)

func TestEveryEntryRendersForASession(t *testing.T) {
	s := Session{BaseURL: "http://127.0.0.1:8000/sessions/s-1/v1", AnthropicURL: "http://127.0.0.1:8000/sessions/s-1",
		Key: "rllm-sess-abc", Home: "/home/rllm", Prompt: "fix the bug; don't \"break\" {{.Key}}"}
	urlRE := regexp.MustCompile(`https?://[^\s"']+`)
	for _, e := range Entries {
		t.Run(e.Name, func(t *testing.T) {
			if e.Package == "" || e.Version == "" || e.Bin == "" || e.Wire == "" || len(e.Command) == 0 || e.Command[0] != e.Bin {
				t.Fatalf("incomplete entry: %+v", e)
			}
			if !regexp.MustCompile(`^\d+\.\d+\.\d+$`).MatchString(e.Version) {
				t.Errorf("version %q is not pinned", e.Version)
			}
			r, err := e.Render(s)
			if err != nil {
				t.Fatal(err)
			}
			// The prompt is one argument, as given (never templated itself).
			if !slices.Contains(r.Command, s.Prompt) {
				t.Errorf("command %q does not carry the prompt as one argument", r.Command)
			}
			// Every URL it is given is the session's.
			var all []string
			all = append(all, r.Env...)
			for _, f := range r.Files {
				all = append(all, string(f.Data))
			}
			reached := false
			for _, text := range all {
				for _, u := range urlRE.FindAllString(text, -1) {
					if strings.Contains(u, "opencode.ai/config.json") { // a $schema name, never fetched
						continue
					}
					p, err := url.Parse(u)
					if err != nil || p.Host != "127.0.0.1:8000" || !strings.HasPrefix(p.Path, "/sessions/s-1") {
						t.Errorf("points at %s, not the session", u)
					}
					reached = true
				}
				if strings.Contains(text, s.Key) {
					reached = true
				}
			}
			if !reached {
				t.Error("nothing points the harness at the session")
			}
		})
	}
}

func TestLookupNamesTheHarnesses(t *testing.T) {
	if _, err := Lookup("claude"); err == nil || !strings.Contains(err.Error(), "claude-code") {
		t.Errorf("err = %v", err)
	}
}

func TestInstallRefusesWithoutItsTool(t *testing.T) {
	for _, name := range []string{"pi", "aider"} {
		e, _ := Lookup(name)
		err := Install(context.Background(), t.TempDir(), e, Tools{}, io.Discard)
		if err == nil || usererr.ExitCode(context.Background(), err) != usererr.ExitUsage {
			t.Errorf("%s: err = %v, want a usage error", name, err)
		}
		if e.Installed(t.TempDir()) {
			t.Errorf("%s counts as installed", name)
		}
	}
}

func TestCacheDir(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	for _, tc := range []struct {
		env  map[string]string
		euid int
		want string
	}{
		{map[string]string{"XDG_CACHE_HOME": "/c", "HOME": "/home/u"}, 1000, "/c/rllm/harnesses"},
		{map[string]string{"XDG_CACHE_HOME": "rel", "HOME": "/home/u"}, 1000, "/home/u/.cache/rllm/harnesses"},
		{map[string]string{"HOME": "/root"}, 0, "/var/cache/rllm/harnesses"},
	} {
		if got := CacheDir(env(tc.env), tc.euid); got != tc.want {
			t.Errorf("%v euid %d: %s, want %s", tc.env, tc.euid, got, tc.want)
		}
	}
}
