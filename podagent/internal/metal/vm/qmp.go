package vm

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"time"
)

// qmp is a minimal client of QEMU's machine protocol: JSON lines over a
// unix socket; asynchronous events are skipped while waiting for a reply.
type qmp struct {
	conn net.Conn
	r    *bufio.Reader
}

func dialQMP(ctx context.Context, path string) (*qmp, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, err
	}
	q := &qmp{conn: conn, r: bufio.NewReader(conn)}
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	if _, err := q.r.ReadBytes('\n'); err != nil { // greeting
		conn.Close()
		return nil, fmt.Errorf("qmp greeting: %w", err)
	}
	if _, err := q.do("qmp_capabilities", nil); err != nil {
		conn.Close()
		return nil, err
	}
	return q, nil
}

func (q *qmp) close() { q.conn.Close() }

// do runs one command and returns its "return" value.
func (q *qmp) do(cmd string, args any) (json.RawMessage, error) {
	req := map[string]any{"execute": cmd}
	if args != nil {
		req["arguments"] = args
	}
	b, _ := json.Marshal(req)
	if _, err := q.conn.Write(append(b, '\n')); err != nil {
		return nil, err
	}
	for {
		line, err := q.r.ReadBytes('\n')
		if err != nil {
			return nil, fmt.Errorf("qmp %s: %w", cmd, err)
		}
		var resp struct {
			Return json.RawMessage `json:"return"`
			Error  *struct {
				Class, Desc string
			} `json:"error"`
			Event string `json:"event"`
		}
		if err := json.Unmarshal(line, &resp); err != nil {
			return nil, fmt.Errorf("qmp %s: %w", cmd, err)
		}
		switch {
		case resp.Event != "":
			continue
		case resp.Error != nil:
			return nil, fmt.Errorf("qmp %s: %s: %s", cmd, resp.Error.Class, resp.Error.Desc)
		default:
			return resp.Return, nil
		}
	}
}

// status is query-status's "status" (running, paused, inmigrate, ...).
func (q *qmp) status() (string, error) {
	raw, err := q.do("query-status", nil)
	if err != nil {
		return "", err
	}
	var st struct{ Status string }
	err = json.Unmarshal(raw, &st)
	return st.Status, err
}

// waitFor polls fn every 20 ms until it reports done or ctx ends.
func waitFor(ctx context.Context, fn func() (bool, error)) error {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		done, err := fn()
		if err != nil || done {
			return err
		}
		select {
		case <-ctx.Done():
			return errors.Join(ctx.Err(), errors.New("gave up waiting for QEMU"))
		case <-t.C:
		}
	}
}
