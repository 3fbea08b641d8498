package hub

import (
	"net/url"
	"regexp"
	"strings"

	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// Scheme starts a Hub dataset URI.
const Scheme = "hf://"

// URI is a parsed hf://datasets/ORG/NAME[@REV][/CONFIG][/SPLIT or glob].
type URI struct {
	Repo     string // ORG/NAME
	Revision string // "" means main; a branch, tag or commit ("refs/convert/parquet" is written refs%2Fconvert%2Fparquet)
	// Rest is what follows the repo: "", "CONFIG", "SPLIT", "CONFIG/SPLIT"
	// or a file glob (any part with * ? [ or a data file extension).
	Config, Split, Glob string
	// One is set when Rest was a single name: a config or a split,
	// decided against the dataset (Config and Split are both empty).
	One string
}

// IsURI reports whether s is an hf:// URI.
func IsURI(s string) bool { return strings.HasPrefix(s, Scheme) }

var (
	repoPartRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,95}$`)
	revRE      = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._/-]{0,199}$`)
	nameRE     = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9 ._()-]{0,199}$`)
)

// validRepoPart is a Hub user, organisation or repository name.
func validRepoPart(s string) bool {
	return repoPartRE.MatchString(s) && !strings.Contains(s, "..") && !strings.Contains(s, "--") && !strings.HasSuffix(s, ".")
}

// ValidRepo reports whether s is ORG/NAME as the Hub accepts it.
func ValidRepo(s string) bool {
	org, name, ok := strings.Cut(s, "/")
	return ok && validRepoPart(org) && validRepoPart(name)
}

// ParseURI parses an hf:// dataset URI. Errors name the URI and the form.
func ParseURI(s string) (URI, error) {
	bad := func(why string) (URI, error) {
		return URI{}, usererr.Errorf("%q is not a Hub dataset URI (%s); write hf://datasets/ORG/NAME[@REVISION][/CONFIG][/SPLIT], e.g. hf://datasets/openai/gsm8k/main/train", s, why)
	}
	rest, ok := strings.CutPrefix(s, Scheme)
	if !ok {
		return bad("it does not start with hf://")
	}
	rest, ok = strings.CutPrefix(rest, "datasets/")
	if !ok {
		return bad("only datasets are supported: hf://datasets/...")
	}
	parts := strings.Split(rest, "/")
	if len(parts) < 2 {
		return bad("it names no ORG/NAME")
	}
	u := URI{}
	name := parts[1]
	if n, rev, hasRev := strings.Cut(name, "@"); hasRev {
		name = n
		r, err := url.PathUnescape(rev)
		if err != nil || !revRE.MatchString(r) || strings.Contains(r, "..") || strings.HasSuffix(r, "/") {
			return bad("the revision after @ must be a branch, tag or commit; write refs/convert/parquet as refs%2Fconvert%2Fparquet")
		}
		u.Revision = r
	}
	if !validRepoPart(parts[0]) || !validRepoPart(name) {
		return bad("ORG and NAME are letters, digits, '-', '_' and '.'")
	}
	u.Repo = parts[0] + "/" + name
	tail := parts[2:]
	if len(tail) > 0 && tail[len(tail)-1] == "" {
		tail = tail[:len(tail)-1] // a trailing slash
	}
	if len(tail) == 0 {
		return u, nil
	}
	joined := strings.Join(tail, "/")
	if isGlob(joined) {
		for _, p := range tail {
			if p == "" || p == "." || p == ".." {
				return bad("the file glob has an empty, . or .. part")
			}
		}
		u.Glob = joined
		return u, nil
	}
	for _, p := range tail {
		if !nameRE.MatchString(p) || strings.Contains(p, "..") {
			return bad("a config or split name is letters, digits, spaces, '.', '_', '-' and parentheses")
		}
	}
	switch len(tail) {
	case 1:
		u.One = tail[0]
	case 2:
		u.Config, u.Split = tail[0], tail[1]
	default:
		return bad("after ORG/NAME come at most CONFIG/SPLIT, or a file glob such as data/*.parquet")
	}
	return u, nil
}

// isGlob: a path with a wildcard, or naming a data file.
func isGlob(p string) bool {
	if strings.ContainsAny(p, "*?[") {
		return true
	}
	_, ok := dataExt(p)
	return ok
}

// dataExts are the file types rllm reads (pkg/dataset).
var dataExts = []string{".parquet", ".jsonl", ".json", ".csv"}

func dataExt(p string) (string, bool) {
	for _, e := range dataExts {
		if strings.HasSuffix(strings.ToLower(p), e) {
			return e, true
		}
	}
	return "", false
}

// String writes the URI back in its canonical form.
func (u URI) String() string {
	s := Scheme + "datasets/" + u.Repo
	if u.Revision != "" {
		s += "@" + strings.ReplaceAll(u.Revision, "/", "%2F")
	}
	for _, p := range []string{u.One, u.Config, u.Split, u.Glob} {
		if p != "" {
			s += "/" + p
		}
	}
	return s
}
