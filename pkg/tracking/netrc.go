package tracking

import (
	"strings"
)

// NetrcPassword is the password of machine host in a .netrc file's text
// (the entry `wandb login` writes: machine api.wandb.ai login user
// password KEY), or "" when there is none. Tokens are separated by any
// white space; a "default" entry applies to every host; macdef bodies
// (up to an empty line) are skipped.
func NetrcPassword(text, host string) string {
	lines := strings.Split(text, "\n")
	var toks []string
	for i := 0; i < len(lines); i++ {
		f := strings.Fields(lines[i])
		for j := 0; j < len(f); j++ {
			if strings.HasPrefix(f[j], "#") {
				break
			}
			if f[j] == "macdef" {
				// The macro's body runs to the next empty line.
				for i+1 < len(lines) && strings.TrimSpace(lines[i+1]) != "" {
					i++
				}
				break
			}
			toks = append(toks, f[j])
		}
	}
	var def string
	match, isDefault := false, false
	for i := 0; i < len(toks); i++ {
		switch toks[i] {
		case "machine":
			if i+1 < len(toks) {
				i++
				match, isDefault = toks[i] == host, false
			}
		case "default":
			match, isDefault = false, true
		case "password":
			if i+1 < len(toks) {
				i++
				if match {
					return toks[i]
				}
				if isDefault && def == "" {
					def = toks[i]
				}
			}
		case "login", "account":
			i++
		}
	}
	return def
}
