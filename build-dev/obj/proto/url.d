build-dev/obj/proto/url.o: proto/url.c proto/client-int.h proto/client.h \
 /usr/include/cjson/cJSON.h proto/util.h proto/proto.h
proto/client-int.h:
proto/client.h:
/usr/include/cjson/cJSON.h:
proto/util.h:
proto/proto.h:
