package wire

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

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

// TestEveryGeneratedConversionKeepsEveryField fills every field of each
// generated conversion's Go value, sends it through its message and back,
// and wants it whole: a field the generator paired wrongly, or one a
// hand-written conversion it calls drops (a card's, a run's), fails here
// before the conformance suite has to notice it through the plugin.
func TestEveryGeneratedConversionKeepsEveryField(t *testing.T) {
	if len(generatedPairs) < 20 {
		t.Fatalf("%d generated conversions; the verbs' messages are most of them", len(generatedPairs))
	}
	for _, pair := range generatedPairs {
		to, from := reflect.ValueOf(pair[0]), reflect.ValueOf(pair[1])
		in := reflect.New(to.Type().In(0)).Elem()
		n := 0
		fill(in, &n)
		out := from.Call([]reflect.Value{to.Call([]reflect.Value{in})[0]})[0]
		want, _ := json.Marshal(in.Interface())
		got, _ := json.Marshal(out.Interface())
		if string(got) != string(want) {
			t.Errorf("%s through %s and back:\n got %s\nwant %s", in.Type(), to.Type().Out(0), got, want)
		}
	}
}

// fill sets every exported field of v, recursively, to a value no other
// field has, so a swapped or dropped field shows.
func fill(v reflect.Value, n *int) {
	*n++
	switch v.Kind() {
	case reflect.String:
		v.SetString(fmt.Sprintf("s%d", *n))
	case reflect.Int, reflect.Int64:
		if v.Type() == reflect.TypeOf(time.Duration(0)) {
			v.SetInt(int64(*n) * int64(time.Second))
			return
		}
		v.SetInt(int64(*n))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem(), n)
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fill(v.Index(0), n)
	case reflect.Map:
		v.Set(reflect.MakeMap(v.Type()))
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(k, n)
		fill(e, n)
		v.SetMapIndex(k, e)
	case reflect.Struct:
		if v.Type() == reflect.TypeOf(time.Time{}) {
			v.Set(reflect.ValueOf(time.Unix(int64(1e9+*n), int64(*n)).UTC()))
			return
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i), n)
			}
		}
	}
}
