build-dev/tests/test_client: tests/unit/test_client.c proto/client-int.h \
 proto/client.h /usr/include/cjson/cJSON.h proto/util.h proto/proto.h
proto/client-int.h:
proto/client.h:
/usr/include/cjson/cJSON.h:
proto/util.h:
proto/proto.h:
