package tinker

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/rllm-org/rllm-go/pkg/backend/tinker/wire"
	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// Sign-in as the Tinker SDK 0.25 does it (src/tinker/lib/
// internal_client_holder.py, _auth_token_provider.py, _jwt_auth.py):
//
//  1. POST client/config {sdk_version} with the key (or, without a key,
//     a TINKER_CREDENTIAL_CMD credential): the service's flags.
//  2. Without pjwt_auth_enabled every request carries the raw key in
//     X-API-Key (a credential command is then of no use: the SDK requires
//     the key).
//  3. With it, the credential (the key, or the command's output when the
//     flags say credential_default_source "credential_cmd" and the key is
//     not already a JWT) is exchanged at auth/token for a JWT, which every
//     later request carries instead; it is exchanged again when less than
//     jwtRefreshBefore is left of it (the SDK refreshes 5 minutes before
//     expiry in the background and on demand within 60 s) and once after
//     a 401.
//
// A service without client/config (404) is taken to have the default
// flags (raw keys). No key, JWT or command output ever enters a log line
// or an error.

// CredentialCmdEnv is the variable the SDK reads the credential command
// from; rllm reads the same one.
const CredentialCmdEnv = "TINKER_CREDENTIAL_CMD"

// jwtRefreshBefore is how long before its expiry a JWT is exchanged anew.
const jwtRefreshBefore = 5 * time.Minute

// credentialCmdTimeout bounds one run of the credential command.
const credentialCmdTimeout = 60 * time.Second

// credentials is what authenticates the requests: the raw key, or a JWT
// exchanged for a credential and kept fresh.
type credentials struct {
	key string // the API key (may be empty with a credential command)
	cmd string // TINKER_CREDENTIAL_CMD (may be empty)

	mu      sync.Mutex
	useJWT  bool
	fromCmd bool // the JWT is exchanged for the command's output
	jwt     string
	exp     time.Time
	secrets []string // everything to redact: the key, JWTs, command output
	now     func() time.Time
}

func newCredentials(key, cmd string) *credentials {
	c := &credentials{key: key, cmd: cmd, now: time.Now}
	if key != "" {
		c.secrets = append(c.secrets, key)
	}
	return c
}

func (c *credentials) addSecret(s string) {
	if len(s) >= 4 {
		c.secrets = append(c.secrets, s)
	}
}

// redact removes every credential from s.
func (c *credentials) redact(s string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, k := range c.secrets {
		s = strings.ReplaceAll(s, k, "[redacted]")
	}
	return s
}

// runCmd runs the credential command through sh and returns its trimmed
// output (the SDK runs it through the shell on every exchange).
func (c *credentials) runCmd(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, credentialCmdTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", c.cmd)
	var out bytes.Buffer
	cmd.Stdout = &out
	if err := cmd.Run(); err != nil {
		// The command's output may be a partial credential: only the
		// status is told.
		return "", usererr.Errorf("%s failed (%v); fix the command so that it prints a credential", CredentialCmdEnv, exitStatus(err))
	}
	cred := strings.TrimSpace(out.String())
	if cred == "" {
		return "", usererr.Errorf("%s printed nothing; it must print a credential", CredentialCmdEnv)
	}
	c.mu.Lock()
	c.addSecret(cred)
	c.mu.Unlock()
	return cred, nil
}

func exitStatus(err error) error {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return fmt.Errorf("exit status %d", ee.ExitCode())
	}
	return err
}

func (c *credentials) jwtInUse() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.useJWT
}

// CredentialCmd is TINKER_CREDENTIAL_CMD read through getenv (nil: none).
func CredentialCmd(getenv func(string) string) string {
	if getenv == nil {
		return ""
	}
	return strings.TrimSpace(getenv(CredentialCmdEnv))
}

// SignIn signs in once (client/config, then a JWT when the service asks
// for one); the first request signs in by itself, SignIn only makes its
// failure come first.
func (c *Client) SignIn(ctx context.Context) error {
	if c.signedIn.Load() {
		return nil
	}
	c.signMu.Lock()
	defer c.signMu.Unlock()
	if c.signedIn.Load() {
		return nil
	}
	if _, err := c.signIn(ctx); err != nil {
		return err
	}
	c.signedIn.Store(true)
	return nil
}

// header is the X-API-Key value of the next request ("" for none).
func (c *Client) header(ctx context.Context) (string, error) {
	if err := c.SignIn(ctx); err != nil {
		return "", err
	}
	cr := c.cred
	cr.mu.Lock()
	useJWT, jwt, exp := cr.useJWT, cr.jwt, cr.exp
	cr.mu.Unlock()
	if !useJWT {
		return cr.key, nil
	}
	if jwt != "" && cr.now().Add(jwtRefreshBefore).Before(exp) {
		return jwt, nil
	}
	return c.refreshJWT(ctx, jwt)
}

// refreshJWT exchanges the credential for a new JWT unless another
// request already replaced old.
func (c *Client) refreshJWT(ctx context.Context, old string) (string, error) {
	c.jwtMu.Lock()
	defer c.jwtMu.Unlock()
	cr := c.cred
	cr.mu.Lock()
	cur, exp := cr.jwt, cr.exp
	cr.mu.Unlock()
	if cur != old && cur != "" && cr.now().Add(jwtRefreshBefore).Before(exp) {
		return cur, nil
	}
	cred := cr.key
	if cr.fromCmd {
		var err error
		if cred, err = cr.runCmd(ctx); err != nil {
			return "", err
		}
	}
	data, err := c.retried(ctx, http.MethodPost, wire.PathAuthToken, cred, []byte("{}"))
	if err != nil {
		return "", fmt.Errorf("exchanging the credential for a JWT at %s: %w", c.BaseURL(), c.classify(err))
	}
	var r wire.AuthTokenResponse
	if json.Unmarshal(data, &r) != nil || r.JWT == "" {
		return "", fmt.Errorf("%s at %s: the answer has no jwt", wire.PathAuthToken, c.BaseURL())
	}
	exp, ok := jwtExpiry(r.JWT)
	if !ok {
		// The SDK treats an unreadable expiry as already due and retries
		// a minute later; a short life here does the same.
		exp = cr.now().Add(jwtRefreshBefore + time.Minute)
	}
	cr.mu.Lock()
	cr.jwt, cr.exp = r.JWT, exp
	cr.addSecret(r.JWT)
	cr.mu.Unlock()
	c.jwtExchanges.Add(1)
	return r.JWT, nil
}

// jwtExpiry reads a JWT's exp claim without checking its signature (the
// SDK's _jwt_auth.py jwt_claims does the same: the token came from the
// service over TLS).
func jwtExpiry(jwt string) (time.Time, bool) {
	parts := strings.Split(jwt, ".")
	if len(parts) != 3 {
		return time.Time{}, false
	}
	payload, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[1], "="))
	if err != nil {
		return time.Time{}, false
	}
	var claims struct {
		Exp *float64 `json:"exp"`
	}
	if json.Unmarshal(payload, &claims) != nil || claims.Exp == nil {
		return time.Time{}, false
	}
	sec := int64(*claims.Exp)
	return time.Unix(sec, int64((*claims.Exp-float64(sec))*1e9)), true
}

// signIn fetches client/config and, when the service asks for it, takes
// the first JWT. It returns the flags.
func (c *Client) signIn(ctx context.Context) (wire.ClientConfigResponse, error) {
	cr := c.cred
	first := cr.key
	if first == "" && cr.cmd != "" {
		var err error
		if first, err = cr.runCmd(ctx); err != nil {
			return wire.ClientConfigResponse{}, err
		}
	}
	body, _ := json.Marshal(wire.ClientConfigRequest{SDKVersion: sdkVersion})
	var flags wire.ClientConfigResponse
	data, err := c.retried(ctx, http.MethodPost, wire.PathClientConfig, first, body)
	var he *HTTPError
	switch {
	case errors.As(err, &he) && (he.Status == http.StatusNotFound || he.Status == http.StatusMethodNotAllowed):
		// A service older than client/config: raw keys.
	case err != nil:
		return flags, fmt.Errorf("asking %s for its client config: %w", c.BaseURL(), c.classify(err))
	default:
		if err := json.Unmarshal(data, &flags); err != nil {
			return flags, fmt.Errorf("%s at %s: the answer is not the client config: %v", wire.PathClientConfig, c.BaseURL(), err)
		}
		c.configFields = countFields(data)
	}
	if !flags.PJWTAuthEnabled {
		if cr.key == "" {
			return flags, usererr.Errorf("the Tinker service at %s takes API keys only (no JWT sign-in, so %s is not used); export the key in the variable backend.tinker.api_key_env names", c.BaseURL(), CredentialCmdEnv)
		}
		return flags, nil
	}
	cr.mu.Lock()
	cr.useJWT = true
	switch {
	case strings.HasPrefix(cr.key, "eyJ"):
		// A JWT given as the key is already a dynamic credential.
	case flags.CredentialDefaultSource == "credential_cmd" || cr.key == "":
		if cr.cmd == "" {
			cr.mu.Unlock()
			return flags, usererr.Errorf("the Tinker service at %s requires dynamic credentials for your organisation; set %s to a command that prints one", c.BaseURL(), CredentialCmdEnv)
		}
		cr.fromCmd = true
	}
	cr.mu.Unlock()
	if _, err := c.refreshJWT(ctx, ""); err != nil {
		return flags, err
	}
	return flags, nil
}

// countFields counts the keys of a JSON object (0 if it is not one).
func countFields(data []byte) int {
	var m map[string]json.RawMessage
	if json.Unmarshal(data, &m) != nil {
		return 0
	}
	return len(m)
}

// sdkVersion is what rllm sends as sdk_version.
const sdkVersion = "rllm-go"
