package auth

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// tokenBytes is the entropy of a generated token. Tokens are random, so a
// plain SHA-256 of one is as hard to reverse as the token is to guess.
const tokenBytes = 32

// TokenFile is the content of a token file: who may call with which bearer
// token, stored as the token's SHA-256.
//
//	tokens:
//	  - {name: ci, sha256: 3f1c..., permissions: [data]}
type TokenFile struct {
	Tokens []TokenEntry `yaml:"tokens"`
}

// TokenEntry is one token.
type TokenEntry struct {
	Name        string   `yaml:"name"`
	SHA256      string   `yaml:"sha256"`
	Permissions []string `yaml:"permissions,flow"`
	// Shards, when set, restricts the token to these shards: calls for
	// other shards, and admin calls for the whole cluster, are refused.
	Shards []uint32 `yaml:"shards,omitempty,flow"`
}

func readTokenFile(path string) (*TokenFile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("token file: %w", err)
	}
	var tf TokenFile
	if len(bytes.TrimSpace(data)) == 0 {
		return &tf, nil
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&tf); err != nil {
		return nil, fmt.Errorf("token file %s: %w", path, err)
	}
	return &tf, nil
}

func loadTokens(path string) (map[[sha256.Size]byte]grant, error) {
	tf, err := readTokenFile(path)
	if err != nil {
		return nil, err
	}
	out := map[[sha256.Size]byte]grant{}
	var errs []error
	names := map[string]bool{}
	for i, e := range tf.Tokens {
		where := fmt.Sprintf("token file %s: tokens[%d] (%s)", path, i, e.Name)
		if strings.TrimSpace(e.Name) == "" {
			errs = append(errs, fmt.Errorf("%s: name is empty", where))
		} else if names[e.Name] {
			errs = append(errs, fmt.Errorf("%s: name used twice", where))
		}
		names[e.Name] = true
		perm, err := ParsePermissions(e.Permissions)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", where, err))
		}
		raw, err := hex.DecodeString(e.SHA256)
		if err != nil || len(raw) != sha256.Size {
			errs = append(errs, fmt.Errorf("%s: sha256 must be %d hex digits", where, 2*sha256.Size))
			continue
		}
		g := grant{name: e.Name, perm: perm}
		if e.Shards != nil {
			g.shards = slices.Clone(e.Shards)
		}
		out[[sha256.Size]byte(raw)] = g
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

// AddToken creates a token for name with permissions perm, restricted to
// shards unless nil, stores its hash in the token file at path (creating
// it), and returns the token, which is stored nowhere else.
func AddToken(path, name string, perm []string, shards []uint32) (string, error) {
	if _, err := ParsePermissions(perm); err != nil {
		return "", err
	}
	if strings.TrimSpace(name) == "" {
		return "", errors.New("token name is empty")
	}
	tf := &TokenFile{}
	if _, err := os.Stat(path); err == nil {
		if tf, err = readTokenFile(path); err != nil {
			return "", err
		}
	}
	for _, e := range tf.Tokens {
		if e.Name == name {
			return "", fmt.Errorf("token file %s already has a token named %q", path, name)
		}
	}
	raw := make([]byte, tokenBytes)
	if _, err := rand.Read(raw); err != nil {
		return "", err
	}
	tok := "augur_" + base64.RawURLEncoding.EncodeToString(raw)
	tf.Tokens = append(tf.Tokens, TokenEntry{Name: name, SHA256: HashToken(tok), Permissions: perm, Shards: shards})
	data, err := yaml.Marshal(tf)
	if err != nil {
		return "", err
	}
	if err := writeFileAtomic(path, data, 0o600); err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	return tok, nil
}
