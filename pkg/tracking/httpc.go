package tracking

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// maxAnswer bounds what is read of a tracker's answer.
const maxAnswer = 4 << 20

// call sends one request and decodes a 2xx JSON answer into out (when
// non-nil). Network errors and 429/5xx are retryable *sendErrors; other
// statuses are permanent ones carrying the answer's text.
func call(ctx context.Context, c *http.Client, tracker string, req *http.Request, out any) error {
	req = req.WithContext(ctx)
	resp, err := c.Do(req)
	if err != nil {
		return &sendError{msg: fmt.Sprintf("%s: %s", tracker, scrub(err))}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return &sendError{msg: fmt.Sprintf("%s: reading the answer: %s", tracker, scrub(err))}
	}
	if resp.StatusCode/100 != 2 {
		return httpError(tracker, resp, strings.TrimSpace(string(b)))
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return &sendError{status: resp.StatusCode, permanent: true, msg: fmt.Sprintf("%s answered with what is not the JSON it should be: %v", tracker, err)}
	}
	return nil
}

func newJSONRequest(method, u string, body any) (*http.Request, error) {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, u, r)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("User-Agent", "rllm")
	return req, nil
}

// scrub is an error's text without any password a URL in it carries.
func scrub(err error) string {
	var ue *url.Error
	if e, ok := err.(*url.Error); ok {
		ue = e
		cp := *ue
		cp.URL = Redact(ue.URL)
		return cp.Error()
	}
	return err.Error()
}

// Redact is a URL without its user information and query (a password
// pasted in a tracking URI, an upload URL's signature never reach a
// message).
func Redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(a URL that does not parse)"
	}
	u.User = nil
	u.RawQuery, u.ForceQuery = "", false
	u.Fragment = ""
	return u.String()
}
