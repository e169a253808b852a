package connstr

import "testing"

func TestRedact(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"mongodb://alice:s3cret@db:27017/?replicaSet=rs0", "mongodb://alice:xxxxx@db:27017/?replicaSet=rs0"},
		{"mongodb://alice:p%40ss@h1,h2:27018/lk", "mongodb://alice:xxxxx@h1,h2:27018/lk"},
		{"mongodb+srv://bob:pw@cluster.example/?authSource=admin&tlsCertificateKeyFilePassword=k3y",
			"mongodb+srv://bob:xxxxx@cluster.example/?authSource=admin&tlsCertificateKeyFilePassword=xxxxx"},
		{"mongodb://db/?authMechanism=MONGODB-AWS&authMechanismProperties=AWS_SESSION_TOKEN:t0k", "mongodb://db/?authMechanism=MONGODB-AWS&authMechanismProperties=xxxxx"},
		{"mongodb://carol@db", "mongodb://carol@db"},
		{"mongodb://db:27017", "mongodb://db:27017"},
		{"not a uri:secret@x", "not a uri:xxxxx@x"},
		// A password written unescaped, holding the characters that end an
		// authority, or an '@'.
		{"mongodb://alice:pa/ss@db/lk", "mongodb://alice:xxxxx@db/lk"},
		{"mongodb://alice:pa?ss@db/?w=1", "mongodb://alice:xxxxx@db/?w=1"},
		{"mongodb://alice:p@ss@db", "mongodb://alice:xxxxx@db"},
	}
	for _, tc := range tests {
		if got := Redact(tc.in); got != tc.want {
			t.Errorf("Redact(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
