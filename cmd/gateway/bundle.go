package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/portcullis/portcullis/bundles"
)

func bundleCmd() *cobra.Command {
	return group("bundle", "build, sign and inspect policy bundles",
		bundleBuildCmd(), bundleSignCmd(), bundleInspectCmd())
}

func bundleBuildCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "build DIR -o FILE.tar.gz [--signing-key KEY.pem --key-id ID] [--revision R]",
		Short: "pack a bundle directory into a .tar.gz, signed when a key is given",
		Args:  exactArgs(1),
	}
	fs := c.Flags()
	out := fs.StringP("output", "o", "", "output .tar.gz (required)")
	key := fs.String("signing-key", "", "PEM private key (RSA, ECDSA P-256/384/521 or Ed25519) to sign with")
	kid := fs.String("key-id", "", "key id named in the signature (policy.key_id)")
	rev := fs.String("revision", "", "revision written into .manifest")
	c.RunE = func(c *cobra.Command, pos []string) error {
		if err := required(fs, "output"); err != nil {
			return err
		}
		return cmdBundleBuild(pos[0], *out, *key, *kid, *rev, c.OutOrStdout())
	}
	return c
}

func cmdBundleBuild(dir, out, key, kid, rev string, stdout io.Writer) error {
	pos := []string{dir}
	st, err := os.Stat(pos[0])
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return fmt.Errorf("bundle build: %s is not a directory", pos[0])
	}
	opts := bundles.BuildOptions{Revision: rev, KeyID: kid}
	if key != "" {
		if opts.SigningKey, err = os.ReadFile(key); err != nil {
			return fmt.Errorf("signing key: %w", err)
		}
	}
	b, err := bundles.Build(os.DirFS(pos[0]), opts)
	if err != nil {
		return err
	}
	if err := writeAtomic(out, b); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s (%d bytes, signed: %v)\n", out, len(b), key != "")
	return nil
}

// cmdBundleSign signs a directory in place (writing its .signatures.json)
// or a .tar.gz into -o (default: in place).
func bundleSignCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "sign DIR|FILE.tar.gz --signing-key KEY.pem [--key-id ID] [-o FILE.tar.gz]",
		Short: "sign a bundle directory in place, or an archive into -o (default: in place)",
		Args:  exactArgs(1),
	}
	fs := c.Flags()
	out := fs.StringP("output", "o", "", "output .tar.gz (archives only; default: replace the input)")
	key := fs.String("signing-key", "", "PEM private key (required)")
	kid := fs.String("key-id", "", "key id named in the signature")
	c.RunE = func(c *cobra.Command, pos []string) error {
		if err := required(fs, "signing-key"); err != nil {
			return err
		}
		return cmdBundleSign(pos[0], *out, *key, *kid, c.OutOrStdout())
	}
	return c
}

func cmdBundleSign(src, out, key, kid string, stdout io.Writer) error {
	pos := []string{src}
	priv, err := os.ReadFile(key)
	if err != nil {
		return fmt.Errorf("signing key: %w", err)
	}
	fsys, err := bundles.Open(pos[0])
	if err != nil {
		return err
	}
	st, err := os.Stat(pos[0])
	if err != nil {
		return err
	}
	if st.IsDir() {
		if out != "" {
			return errors.New("bundle sign: -o is for archives; use bundle build to pack a directory")
		}
		files, err := bundles.Files(fsys)
		if err != nil {
			return err
		}
		sig, err := bundles.SignFiles(files, priv, kid)
		if err != nil {
			return err
		}
		p := filepath.Join(pos[0], bundles.SignaturesFile)
		if err := writeAtomic(p, sig); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "wrote %s (%d files signed)\n", p, len(files))
		return nil
	}
	b, err := bundles.Build(fsys, bundles.BuildOptions{SigningKey: priv, KeyID: kid})
	if err != nil {
		return err
	}
	dst := out
	if dst == "" {
		dst = pos[0]
	}
	if err := writeAtomic(dst, b); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s (signed)\n", dst)
	return nil
}

func bundleInspectCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "inspect DIR|FILE.tar.gz [--verification-key PUB.pem [--key-id ID]] [--json]",
		Short: "show a bundle's manifest, files and signature",
		Args:  exactArgs(1),
	}
	fs := c.Flags()
	pub := fs.String("verification-key", "", "PEM public key to verify the signature with")
	kid := fs.String("key-id", "", "key id the signature must name")
	asJSON := fs.Bool("json", false, "print JSON")
	c.RunE = func(c *cobra.Command, pos []string) error {
		return cmdBundleInspect(pos[0], *pub, *kid, *asJSON, c.OutOrStdout())
	}
	return c
}

func cmdBundleInspect(src, pub, kid string, asJSON bool, stdout io.Writer) error {
	pos := []string{src}
	fsys, err := bundles.Open(pos[0])
	if err != nil {
		return err
	}
	var rep bundles.Report
	if pub != "" {
		vc, err := bundles.VerificationConfig(pub, kid)
		if err != nil {
			return err
		}
		rep, err = bundles.Inspect(fsys, vc)
		if err != nil {
			return err
		}
		if rep.Signature != nil && rep.Signature.Verified && kid != "" && rep.Signature.KeyID != kid {
			rep.Signature.Verified = false
			rep.Signature.Error = fmt.Sprintf("signed with key id %q, want %q", rep.Signature.KeyID, kid)
		}
	} else if rep, err = bundles.Inspect(fsys, nil); err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(stdout, "bundle:    %s\nrevision:  %s\nroots:     %s\n", pos[0], orNone(rep.Revision), strings.Join(quoteAll(rep.Roots), ", "))
		switch {
		case rep.Signature == nil:
			fmt.Fprintln(stdout, "signature: none")
		default:
			state := "not verified (no --verification-key)"
			if pub != "" {
				state = "VERIFIED"
				if !rep.Signature.Verified {
					state = "FAILED: " + rep.Signature.Error
				}
			}
			fmt.Fprintf(stdout, "signature: key id %s, algorithm %s, %s\n", orNone(rep.Signature.KeyID), orNone(rep.Signature.Algorithm), state)
		}
		fmt.Fprintf(stdout, "files (%d):\n", len(rep.Files))
		for _, f := range rep.Files {
			fmt.Fprintf(stdout, "  %s  %8d  %s\n", f.SHA256, f.Size, f.Path)
		}
	}
	if pub != "" && (rep.Signature == nil || !rep.Signature.Verified) {
		return errors.New("signature did not verify")
	}
	return nil
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = fmt.Sprintf("%q", s)
	}
	return out
}

// writeAtomic writes via a temp file and rename, so a reader (a gateway
// watching the path) never sees half a bundle.
func writeAtomic(path string, b []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path)+"-")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
