package wire

import (
	"testing"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/plugins/storepb"
)

// TestAClaimsTokenIsTheGrant: a claim's answer carries the token the
// plugin's store granted beside the card; the agent holds that token even
// when the card disagrees (a store that answers with the card as it read
// it, before the write), so its owner writes carry the grant.
func TestAClaimsTokenIsTheGrant(t *testing.T) {
	granted := board.ClaimToken{Marker: "hosta-4242", Epoch: 7}
	read := board.Card{ID: "c1", State: board.StateReady, ClaimEpoch: 6}
	got := FromCardTokenReply(&storepb.CardTokenReply{Card: ToCard(read), Token: ToClaimToken(granted)})
	if got.Token() != granted {
		t.Errorf("the agent holds %+v; the plugin granted %+v", got.Token(), granted)
	}
	if got.ID != "c1" || got.State != board.StateReady {
		t.Errorf("card = %+v, want the reply's card with the granted claim", got)
	}
	// A claim answered without a token (none is sent today) is the card's.
	held := board.Card{ID: "c2", Claim: "hostb-1", ClaimEpoch: 3}
	if got := FromCardTokenReply(&storepb.CardTokenReply{Card: ToCard(held)}); got.Token() != held.Token() {
		t.Errorf("without a token: %+v, want the card's %+v", got.Token(), held.Token())
	}
}
