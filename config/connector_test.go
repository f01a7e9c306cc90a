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

// source.transactions=whole names each setting it needs that is missing or
// wrong.
func TestCheckSourceTxns(t *testing.T) {
	base := map[string]string{KeyName: "n", KeyClass: "postgres", KeyTopicsRegex: `s\.public\..*`,
		KeySourceTxns: "whole", KeySourceTxnsTopic: "s.transaction", KeyDelivery: ExactlyOnceSink}
	for _, c := range []struct {
		set    map[string]string
		fields []string
	}{
		{nil, nil},
		{map[string]string{KeySourceTxns: "none", KeyDelivery: ExactlyOnce, KeyTasksMax: "4"}, nil},
		{map[string]string{KeySourceTxnsTopic: ""}, []string{KeySourceTxnsTopic}},
		{map[string]string{KeyDelivery: ExactlyOnce}, []string{KeyDelivery}},
		{map[string]string{KeyTasksMax: "3"}, []string{KeyTasksMax}},
		{map[string]string{KeyTopicsRegex: "", KeyTopics: "a,s.transaction"}, []string{KeySourceTxnsTopic}},
	} {
		raw := map[string]string{}
		for k, v := range base {
			raw[k] = v
		}
		for k, v := range c.set {
			raw[k] = v
		}
		v, errs := ConnectorDefs.Validate(raw)
		if errs != nil {
			t.Fatalf("%v: %v", c.set, errs)
		}
		errs = CheckSourceTxns(v)
		if len(errs) != len(c.fields) {
			t.Errorf("%v: %v, want errors on %v", c.set, errs, c.fields)
		}
		for _, f := range c.fields {
			if len(errs.For(f)) == 0 {
				t.Errorf("%v: %v, want an error on %s", c.set, errs, f)
			}
		}
	}
	c := ParseConnector(Values{KeySourceTxns: "whole", KeySourceTxnsTopic: " s.transaction ", KeySourceTxnsRecords: "500", KeySourceTxnsWaitMs: "2500"})
	if c.SourceTxnsTopic != "s.transaction" || c.SourceTxnsRecords != 500 || c.SourceTxnsWait.Milliseconds() != 2500 {
		t.Errorf("parsed %q %d %v", c.SourceTxnsTopic, c.SourceTxnsRecords, c.SourceTxnsWait)
	}
	if c := ParseConnector(Values{KeySourceTxns: "none", KeySourceTxnsTopic: "s.transaction"}); c.SourceTxnsTopic != "" {
		t.Error("source.transactions=none: the transaction topic is consumed")
	}
}
