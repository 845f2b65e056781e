package admin

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/svc-dev/svc/apiserver/internal/console/login"
	"github.com/svc-dev/svc/apiserver/internal/store"
)

// Console sign-in commands: a password read from standard input
// (never a flag, which other users of the host could see in the process
// list), and a one-time sign-in link.
func init() {
	register("user set-password", "--user U | --email E  (reads the password from stdin; ends the user's sessions)", func(ctx context.Context, env *Env, fs *flag.FlagSet, args []string) (any, error) {
		user, email := fs.String("user", "", ""), fs.String("email", "", "")
		if err := parse(fs, args); err != nil {
			return nil, err
		}
		u, err := findUser(ctx, env.Store, *user, *email)
		if err != nil {
			return nil, err
		}
		if env.In == nil {
			return nil, errors.New("no standard input to read the password from")
		}
		line, err := bufio.NewReader(io.LimitReader(env.In, login.MaxPasswordLen+2)).ReadString('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
		password := strings.TrimRight(line, "\r\n")
		if err := login.SetPassword(ctx, env.Store, u.ID, password); err != nil {
			return nil, err
		}
		return map[string]any{"id": u.ID, "email": u.Email, "passwordSet": true}, nil
	})
	register("user login-link", "--user U | --email E [--base-url URL]  (one-time console sign-in link, valid 15 min)", func(ctx context.Context, env *Env, fs *flag.FlagSet, args []string) (any, error) {
		user, email, base := fs.String("user", "", ""), fs.String("email", "", ""), fs.String("base-url", "", "")
		if err := parse(fs, args); err != nil {
			return nil, err
		}
		u, err := findUser(ctx, env.Store, *user, *email)
		if err != nil {
			return nil, err
		}
		b := *base
		if b == "" {
			b = env.PublicURL
		}
		if b == "" {
			return nil, fmt.Errorf("%w: --base-url is required when SVC_PUBLIC_URL is not set", ErrUsage)
		}
		link, exp, err := login.CreateLoginLink(ctx, env.Store, u.ID, b, time.Now())
		if err != nil {
			return nil, err
		}
		return map[string]any{"userId": u.ID, "email": u.Email, "url": link, "expiresAt": exp}, nil
	})
}

func findUser(ctx context.Context, st *store.Store, id, email string) (store.User, error) {
	switch {
	case id != "" && email != "":
		return store.User{}, fmt.Errorf("%w: give --user or --email, not both", ErrUsage)
	case id != "":
		return st.GetUser(ctx, id)
	case email != "":
		return st.FindUserByEmail(ctx, email)
	}
	return store.User{}, fmt.Errorf("%w: --user or --email is required", ErrUsage)
}
