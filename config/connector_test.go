package config

import (
	"regexp"
	"testing"
)

func TestTopicsOrRegex(t *testing.T) {
	for _, c := range []struct {
		raw   map[string]string
		field string // the field named by the error, "" when valid
	}{
		{map[string]string{KeyTopics: "a,b"}, ""},
		{map[string]string{KeyTopicsRegex: "cdc\\..*"}, ""},
		{map[string]string{}, KeyTopics},
		{map[string]string{KeyTopics: " , "}, KeyTopics},
		{map[string]string{KeyTopics: "a", KeyTopicsRegex: "a.*"}, KeyTopicsRegex},
	} {
		v, errs := ConnectorDefs.Validate(map[string]string{KeyName: "n", KeyClass: "postgres", KeyTopics: c.raw[KeyTopics], KeyTopicsRegex: c.raw[KeyTopicsRegex]})
		if errs != nil {
			t.Fatalf("%v: %v", c.raw, errs)
		}
		errs = CheckTopics(v)
		if (c.field == "") != (errs == nil) || c.field != "" && len(errs.For(c.field)) == 0 {
			t.Errorf("%v: %v, want an error on %q", c.raw, errs, c.field)
		}
	}
	if _, errs := ConnectorDefs.Validate(map[string]string{KeyName: "n", KeyClass: "p", KeyTopicsRegex: "a("}); len(errs.For(KeyTopicsRegex)) == 0 {
		t.Error("invalid regular expression accepted")
	}
	// The pattern matches whole names, as Kafka Connect's does.
	re := regexp.MustCompile(ParseConnector(Values{KeyTopicsRegex: "cdc\\.[a-z]+"}).TopicsPattern())
	for topic, want := range map[string]bool{"cdc.orders": true, "cdc.orders2": false, "xcdc.orders": false, "cdc.": false} {
		if re.MatchString(topic) != want {
			t.Errorf("%s: match %v, want %v", topic, !want, want)
		}
	}
}
