build-dev/obj/proto/ws.o: proto/ws.c proto/client-int.h proto/client.h \
 /usr/include/cjson/cJSON.h proto/util.h proto/proto.h
proto/client-int.h:
proto/client.h:
/usr/include/cjson/cJSON.h:
proto/util.h:
proto/proto.h:
