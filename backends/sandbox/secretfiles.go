package sandbox

import "strings"

// secretFileExact are base names that hold credentials wherever they are
// found in a granted tree: credential stores of common tools and private
// keys by their conventional names.
var secretFileExact = map[string]bool{
	".netrc": true, "_netrc": true, ".git-credentials": true, ".npmrc": true,
	".pypirc": true, ".pgpass": true, ".my.cnf": true, ".htpasswd": true,
	".dockercfg": true, ".boto": true, ".s3cfg": true,
	".ssh": true, ".gnupg": true, ".aws": true, ".azure": true, ".kube": true,
	"id_rsa": true, "id_dsa": true, "id_ecdsa": true, "id_ed25519": true,
	"id_ecdsa_sk": true, "id_ed25519_sk": true,
}

// secretFileSuffixes are extensions of private key and keystore files.
var secretFileSuffixes = []string{".key", ".p12", ".pfx", ".jks", ".keystore"}

// SecretFileName reports whether a file or directory with this base name is
// secret-shaped: hidden from programs and file tools at every depth of every
// grant, whatever the policy granted. It is the one list both the OS
// sandbox (deny overlays) and the file tools (fs_denied, skipped in listings
// and searches) apply, so what Exec cannot see fs.read cannot fetch.
//
// The rules: .env and any name starting with ".env" (.env.local, .envrc);
// credential stores (.netrc, .git-credentials, .npmrc, .pypirc, .pgpass,
// .my.cnf, .htpasswd, .dockercfg, .boto, .s3cfg); credential directories
// (.ssh, .gnupg, .aws, .azure, .kube); SSH private keys by name (id_rsa,
// id_ed25519, ...); and private key or keystore files (*.key, *.p12, *.pfx,
// *.jks, *.keystore). Names compare case-insensitively: on a
// case-insensitive file system ".ENV" opens ".env".
func SecretFileName(name string) bool {
	n := strings.ToLower(name)
	if strings.HasPrefix(n, ".env") {
		return true
	}
	if secretFileExact[n] {
		return true
	}
	for _, s := range secretFileSuffixes {
		if len(n) > len(s) && strings.HasSuffix(n, s) {
			return true
		}
	}
	return false
}
