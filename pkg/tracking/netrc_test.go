package tracking

import "testing"

func TestNetrcPassword(t *testing.T) {
	for _, tc := range []struct {
		name, text, host, want string
	}{
		{"wandb login", "machine api.wandb.ai\n  login user\n  password KEY1\n", "api.wandb.ai", "KEY1"},
		{"one line", "machine a login u password A machine api.wandb.ai login user password KEY2", "api.wandb.ai", "KEY2"},
		{"other host", "machine api.wandb.ai login user password KEY1\n", "wandb.example.com", ""},
		{"default", "machine a login u password A\ndefault login u password D\n", "b", "D"},
		{"machine beats default", "default login u password D\nmachine b login u password B\n", "b", "B"},
		{"comment", "# machine api.wandb.ai password NO\nmachine api.wandb.ai password YES\n", "api.wandb.ai", "YES"},
		{"macdef skipped", "macdef init\nmachine api.wandb.ai password NO\n\nmachine api.wandb.ai password YES\n", "api.wandb.ai", "YES"},
		{"tabs and CRLF", "machine\tapi.wandb.ai\r\n\tlogin user\r\n\tpassword K3\r\n", "api.wandb.ai", "K3"},
		{"truncated", "machine api.wandb.ai login user password", "api.wandb.ai", ""},
		{"empty", "", "api.wandb.ai", ""},
	} {
		if got := NetrcPassword(tc.text, tc.host); got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, got, tc.want)
		}
	}
}

func FuzzNetrcPassword(f *testing.F) {
	f.Add("machine api.wandb.ai login user password K\n", "api.wandb.ai")
	f.Add("macdef x\nmachine y password z", "y")
	f.Add("default password", "")
	f.Fuzz(func(t *testing.T, text, host string) {
		NetrcPassword(text, host) // never panics
	})
}
