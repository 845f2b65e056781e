package e2e

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// logBuffer collects a child process's output; safe to read while the
// process still writes.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// startProcess starts cmd with its output collected; when the test ends the
// process gets SIGINT and is waited for, and its output is logged if the
// test failed.
func startProcess(t testing.TB, name string, cmd *exec.Cmd) *logBuffer {
	t.Helper()
	logs := &logBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	must(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("%s logs:\n%s", name, logs.String())
		}
	})
	return logs
}

// waitReady polls url until it answers 200 (a readiness poll with a deadline).
func waitReady(t testing.TB, name, url string, timeout time.Duration, logs *logBuffer) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not become ready: %v\n%s", name, err, logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitReadyOrPortTaken is waitReady that returns false at once when the
// process could not bind its address (taken since it was picked).
func waitReadyOrPortTaken(t testing.TB, name, url string, timeout time.Duration, logs *logBuffer) bool {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return true
			}
		}
		if strings.Contains(logs.String(), "bind: address already in use") {
			return false
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not become ready: %v\n%s", name, err, logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// do sends one request (bearer and body optional) and returns the answer
// with its whole body.
func do(t testing.TB, method, url, bearer string, body []byte, header http.Header) (*http.Response, []byte) {
	t.Helper()
	res, b, err, contract := request(method, url, bearer, body, header)
	must(t, err)
	if contract != nil {
		t.Error(contract)
	}
	return res, b
}

// postJSON POSTs body as JSON with a bearer, requires a 200 (the failure
// names what) and decodes the answer into out.
func postJSON(t testing.TB, what, url, bearer, body string, out any) {
	t.Helper()
	resp, b := do(t, http.MethodPost, url, bearer, []byte(body), http.Header{"Content-Type": {"application/json"}})
	if resp.StatusCode != 200 {
		t.Fatalf("%s: %d %s", what, resp.StatusCode, b)
	}
	must(t, json.Unmarshal(b, out))
}

// tryDo is do for goroutines: it returns the error (a failed request or an
// answer outside the OpenAPI document) instead of failing the test (t.Fatal
// must not be called off the test's goroutine).
func tryDo(method, url, bearer string, body []byte, header http.Header) (*http.Response, []byte, error) {
	res, b, err, contract := request(method, url, bearer, body, header)
	if err == nil {
		err = contract
	}
	return res, b, err
}

// request sends one request; contract is checkOpenAPI's verdict on the answer.
func request(method, url, bearer string, body []byte, header http.Header) (res *http.Response, b []byte, err, contract error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		return nil, nil, err, nil
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	res, err = http.DefaultClient.Do(req)
	if err != nil {
		return nil, nil, err, nil
	}
	defer res.Body.Close()
	b, err = io.ReadAll(res.Body)
	if err != nil {
		return res, b, err, nil
	}
	return res, b, nil, checkOpenAPI(req, res, b)
}
