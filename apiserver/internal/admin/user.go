package admin

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/svc-dev/svc/apiserver/internal/console/login"
	"github.com/svc-dev/svc/apiserver/internal/store"
)

// userCommands: user create, and the console sign-in commands: a password
// read from standard input (never a flag, which other users of the host
// could see in the process list), and a one-time sign-in link.
func (a *cli) userCommands() []*cobra.Command {
	var email, user, base string
	create := a.verb("create", "--email E", []string{"email"}, func(ctx context.Context, _ *cobra.Command) (any, error) {
		return a.env.Store.CreateUser(ctx, email)
	})
	create.Flags().StringVar(&email, "email", "", "the user's email")
	setPassword := a.verb("set-password", "--user U | --email E  (reads the password from stdin; ends the user's sessions)", nil,
		func(ctx context.Context, _ *cobra.Command) (any, error) {
			u, err := findUser(ctx, a.env.Store, user, email)
			if err != nil {
				return nil, err
			}
			if a.env.In == nil {
				return nil, errors.New("no standard input to read the password from")
			}
			line, err := bufio.NewReader(io.LimitReader(a.env.In, login.MaxPasswordLen+2)).ReadString('\n')
			if err != nil && !errors.Is(err, io.EOF) {
				return nil, err
			}
			password := strings.TrimRight(line, "\r\n")
			if err := login.SetPassword(ctx, a.env.Store, u.ID, password); err != nil {
				return nil, err
			}
			return map[string]any{"id": u.ID, "email": u.Email, "passwordSet": true}, nil
		})
	loginLink := a.verb("login-link", "--user U | --email E [--base-url URL]  (one-time console sign-in link, valid 15 min)", nil,
		func(ctx context.Context, _ *cobra.Command) (any, error) {
			u, err := findUser(ctx, a.env.Store, user, email)
			if err != nil {
				return nil, err
			}
			b := base
			if b == "" {
				b = a.env.PublicURL
			}
			if b == "" {
				return nil, fmt.Errorf("%w: --base-url is required when SVC_PUBLIC_URL is not set", ErrUsage)
			}
			link, exp, err := login.CreateLoginLink(ctx, a.env.Store, u.ID, b, time.Now())
			if err != nil {
				return nil, err
			}
			return map[string]any{"userId": u.ID, "email": u.Email, "url": link, "expiresAt": exp}, nil
		})
	for _, c := range []*cobra.Command{setPassword, loginLink} {
		c.Flags().StringVar(&user, "user", "", "user id")
		c.Flags().StringVar(&email, "email", "", "the user's email")
	}
	loginLink.Flags().StringVar(&base, "base-url", "", "the console's external base URL (default SVC_PUBLIC_URL)")
	return []*cobra.Command{noun("user", create, setPassword, loginLink)}
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
